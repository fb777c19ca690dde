"""gpu_results.py — the experiments' GPU points in their own sections: each experiment's gpu
profile, which the GPU kit runs (`oomlab run --profile gpu --device cuda`) into
reports/results/gpu/<record>/NN_name.json, in the experiments' results schema and judged by
the spec's gpu_claims (experiments/runner/gpu_claims.h).

newest(name, gpu_dir) -> GpuResult(record, started, doc) or None: the newest record by its
run's start (gpu_order.newest_first: the one ordering of the report) holding a finished
NN_name.json that validates (results.load_results; a run the budget cut short,
NN_name.partial.json, is never read); a record's dry run (provenance dry_run) never counts.
combined_status(cpu_status, gpu_status) -> the experiment's status over its CPU / meta verdict
and its GPU verdict, by the rule of docs/VERDICTS.md: each status stands for the sub-claim
outcomes it sums up (confirmed: all hold; refuted: all judged fail; depends: both;
inconclusive: noise; pending GPU: the rest holds, a GPU claim open), and a CPU verdict's open
GPU claims are the GPU verdict's to answer once one exists. Without a GPU result the CPU
status stands.
section(name, gpu, shown_dir, figure=None) -> the section's "GPU points" markdown: the record,
its GPU and run start, the claims with their measured interval and bound, the figure of them
(figure: its path relative to the report, drawn by gpu_figure.draw), the points, and the GPU
verdict; or a line saying no GPU record holds this experiment yet.
Contract: never raises on a missing or broken record (it is skipped). Standard library only.
"""
import json
from collections import namedtuple
from pathlib import Path

from oomlab_report.fmt import md_table, repo_link
from oomlab_report.gpu_order import newest_first, run_started
from oomlab_report.results import ResultsError, load_results

GpuResult = namedtuple("GpuResult", "record started doc")

# Each experiment-level status as the sub-claim outcomes it stands for (verdict_rule.h).
_PARTS = {"confirmed": {"holds"}, "refuted": {"fails"}, "depends": {"holds", "fails"},
          "inconclusive": {"noise"}, "pending GPU": {"holds", "pending"}}


def _status(parts):
    """verdict_rule.h's verdict_status over a set of outcomes."""
    if not parts:
        return "inconclusive"
    if "fails" in parts:
        return "depends" if "holds" in parts else "refuted"
    if "noise" in parts:
        return "inconclusive"
    return "pending GPU" if "pending" in parts else "confirmed"


def combined_status(cpu_status, gpu_status):
    if gpu_status is None:
        return cpu_status
    cpu = set(_PARTS.get(cpu_status, {"noise"})) - {"pending"}   # its GPU claims: the GPU verdict's
    gpu = {"pending"} if gpu_status == "pending GPU" else set(_PARTS.get(gpu_status, {"noise"}))
    return _status(cpu | gpu)


def _dry_run(folder):
    try:
        return json.loads((Path(folder) / "provenance.json").read_text(encoding="utf-8")).get("dry_run") is True
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return False


def newest(name, gpu_dir, exp_dir=None):
    gpu_dir = Path(gpu_dir)
    if not gpu_dir.is_dir():
        return None
    folders = [f for f in gpu_dir.iterdir() if f.is_dir() and (f / f"{name}.json").is_file() and not _dry_run(f)]
    for folder in newest_first(folders):
        try:
            doc = load_results(folder / f"{name}.json", *([exp_dir] if exp_dir else []))
        except ResultsError:
            continue
        if doc["config"].get("profile") == "gpu":
            return GpuResult(folder.name, run_started(folder).shown, doc)
    return None


def _gpu_name(doc):
    for d in doc["context"].get("devices", []):
        if str(d.get("device", "")).startswith("cuda"):
            return d.get("physical", d["device"])
    return doc["context"].get("device", "?")


def _ms(p):
    v = (p.get("metrics", {}).get("step_time_s") or {}).get("median")
    return f"{1e3 * v:.2f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else ""


def _peak(p):
    peaks = [s.get("allocated_bytes.all.peak") for s in (p.get("memory", {}).get("devices") or {}).values()]
    peaks = [v for v in peaks if isinstance(v, (int, float))]
    return f"{max(peaks) / 2**30:.3f}" if peaks else ""


def _load(p):
    load = p.get("host_load")
    return f"{load[0]:.2f}" if isinstance(load, list) and load and isinstance(load[0], (int, float)) else ""


def measured(claim):
    """The claim's value as its text states it (a claim's name may itself hold ": ")."""
    text, name = str(claim.get("text", "")), str(claim.get("name", ""))
    rest = text[len(name) + 2:] if text.startswith(name + ": ") else text.split(": ", 1)[-1]
    return rest.rsplit(", claimed ", 1)[0] if ", claimed " in rest else ""


def section(name, gpu, shown_dir, figure=None):
    if gpu is None:
        return (f"### GPU points\n\n_No GPU record under `{shown_dir}/gpu/` holds `{name}.json` yet: its GPU "
                f"claims are pending. The GPU kit runs `oomlab run experiments/{name} --profile gpu --device cuda` "
                "(scripts/gpu_run.sh)._\n")
    doc = gpu.doc
    claims = doc["summary"].get("claims", [])
    rows = [[c["name"], measured(c), c["bound"], f"**{c['judged']}**"] for c in claims]
    points = [[p["name"], p["command"], p["outcome"]["status"], _ms(p), _peak(p), _load(p)] for p in doc["points"]]
    link = repo_link(f"{shown_dir}/gpu/{gpu.record}/{name}.json")
    out = [f"### GPU points: **{doc['verdict']['status']}**\n",
           f"From GPU record [`{gpu.record}`]({link}) ({_gpu_name(doc)}, run started {gpu.started}, "
           f"git `{doc['context'].get('git_sha', '?')}`): the newest record holding this experiment's gpu "
           "profile, judged by the claims of its `experiment.json` (`gpu_claims`) under the same rule.\n",
           md_table(["GPU claim", "measured", "claimed", "judged"], rows, right=set()) if rows else "",
           f"![{name}: GPU claims, measured vs claimed]({figure})\n" if figure else "",
           f"{doc['verdict']['reason']}\n",
           "<details><summary>The GPU points (step-time median, allocated peak, host load as each started)"
           "</summary>\n",
           md_table(["point", "command", "outcome", "step ms", "peak GiB", "load 1 min"], points, right={3, 4, 5}),
           "</details>\n"]
    return "\n".join(o for o in out if o)
