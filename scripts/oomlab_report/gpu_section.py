"""gpu_section.py — REPORT.md's "GPU results" appendix: one short table per GPU record committed
under reports/results/gpu/<record>/ (read by gpu_record.py; their provenance is check_results.py's),
newest run first (gpu_order.py, the report's one ordering of records).

render_gpu_section(gpu_dir, shown_dir) returns the appendix's markdown, or None when gpu_dir
holds no record. Per record: the GPU and its versions, the commit (and any run's declared local
patch), when the run started and where that comes from, the tests (tests.json's gtest counts,
or the exit statuses of run*/logs/test_rc.txt), the sanitizers (tests.json, or the summary
lines of run*/logs/*.log), and what it ran (oomlab configurations, the meta device's
predictions, PyTorch's, the pairs of one tag in one call, repeated rounds), linked to the
record's README.md, which holds the full tables.
Superseded (the rule): a record is superseded when a record that ran later on the same GPU model
(provenance machine.gpu) ran everything it ran: every oomlab and PyTorch configuration tag,
every test binary and every sanitizer. Superseded records are listed after the others with a
link and the record that superseded them, not tabulated.
Contracts: every figure is read from the record's files (none is written here); what cannot
be read is "missing", never an error. Links are relative to the report's own folder (reports/,
fmt.repo_link). Output is deterministic. Standard library only.
"""
from pathlib import Path

from oomlab_report.fmt import md_table, repo_link
from oomlab_report.gpu_order import newest_first, run_started
from oomlab_report.gpu_record import (MODEL_NAMES, describe_oomlab, load_record, log_sanitizers, points_json,
                                      rc_tests)

MISSING = "missing"


def f_ratio(a, b, digits=2, suffix=""):
    return "—" if a is None or not b else f"{a / b:.{digits}f}{suffix}"


def plural(n, one, many=None):
    return f"{n} {one if n == 1 else many or one + 's'}"


def _int(x):
    return x if isinstance(x, int) and not isinstance(x, bool) else None


# ---- what a record holds --------------------------------------------------------------------

def torch_tags(rec):
    """(run, tag) of PyTorch's measured configurations (not its errors, not `_versions`)."""
    return {(r, t) for (r, t), line in rec.torch.items() if "error" not in line and not t.startswith("_")}


def binaries(rec):
    t = rec.tests if isinstance(rec.tests, dict) else {}
    if isinstance(t.get("binaries"), dict):
        return set(t["binaries"])
    return {name for _, name in rc_tests(rec)}


def sanitizers(rec):
    t = rec.tests if isinstance(rec.tests, dict) else {}
    if isinstance(t.get("sanitizers"), dict):
        return set(t["sanitizers"])
    return {name for name, _ in log_sanitizers(rec)}


def contents(rec):
    """What the record ran, as the superseded rule compares it."""
    return ({"oomlab " + t for _, t in rec.oomlab} | {"PyTorch " + t for _, t in torch_tags(rec)} |
            {"test " + b for b in binaries(rec)} | {"sanitizer " + s for s in sanitizers(rec)})


def gpu_of(rec):
    m = (rec.prov or {}).get("machine")
    return m.get("gpu") if isinstance(m, dict) else None


def superseded(recs):
    """{record name: the first record run after it on the same GPU that ran all it ran}; recs
    newest first."""
    out = {}
    for i, rec in enumerate(recs):
        mine = contents(rec)
        later = [r for r in recs[:i] if gpu_of(r) and gpu_of(r) == gpu_of(rec) and mine <= contents(r)]
        if later:
            out[rec.name] = later[-1].name
    return out


# ---- the table's cells ------------------------------------------------------------------------

def gpu_cell(rec):
    m = (rec.prov or {}).get("machine")
    m = m if isinstance(m, dict) else {}
    cc = f" (compute capability {m['compute_capability']})" if m.get("compute_capability") else ""
    return (f"{m.get('gpu') or MISSING}{cc}; driver {m.get('driver') or MISSING}, CUDA runtime "
            f"{m.get('cuda_runtime') or MISSING}, cuDNN {m.get('cudnn') or MISSING}, PyTorch {m.get('torch') or MISSING}")


def commit_cell(rec, folder_link):
    p = rec.prov or {}
    sha = p.get("commit")
    text = f"`{sha[:12]}`" if isinstance(sha, str) else MISSING
    runs = p.get("runs") if isinstance(p.get("runs"), dict) else {}
    patched = {}
    for run, i in sorted(runs.items()):
        if isinstance(i, dict) and isinstance(i.get("local_patch"), str):
            patched.setdefault(i["local_patch"], []).append(run)
    for patch, which in patched.items():
        text += f"; {', '.join(which)} with a local patch, [{patch}]({folder_link}/{patch})"
    if p.get("dirty") is True and not patched:
        text += " (its tree had uncommitted changes)"
    return text


def tests_cell(rec):
    t = rec.tests if isinstance(rec.tests, dict) else {}
    if isinstance(t.get("binaries"), dict):
        bins = {n: b for n, b in t["binaries"].items() if isinstance(b, dict)}
        total = {k: sum(_int(b.get(k)) or 0 for b in bins.values()) for k in ("passed", "failed", "skipped")}
        failing = sorted(n for n, b in bins.items() if _int(b.get("failed")) or b.get("exit_status") not in (0, None))
        if not bins:
            return "none in this run (tests.json)"
        return (f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped in "
                f"{plural(len(bins), 'binary', 'binaries')} (tests.json)" + (f"; failing or non-zero exit: {', '.join(failing)}" if failing else ""))
    rcs = rc_tests(rec)
    if rcs:
        bad = sorted(f"{name} ({run})" for (run, name), rc in rcs.items() if rc != 0)
        return (f"{len(rcs)} binary runs, {len(rcs) - len(bad)} exited 0 (run*/logs/test_rc.txt)"
                + (f"; non-zero: {', '.join(bad)}" if bad else ""))
    return "none in the record's files"


def sanitizers_cell(rec):
    t = rec.tests if isinstance(rec.tests, dict) else {}
    if isinstance(t.get("sanitizers"), dict):
        parts = []
        for tool, s in sorted(t["sanitizers"].items()):
            s = s if isinstance(s, dict) else {}
            parts.append(f"{tool}: exit {s.get('exit_status', MISSING)}, {s.get('summary') or MISSING}")
        return "; ".join(parts) or "none in this run"
    found = log_sanitizers(rec)
    return "; ".join(f"{name}: {summary}" for name, summary in found) if found else "none in the record's files"


def models(rec):
    names = []
    for doc in rec.oomlab.values():
        m = str(describe_oomlab(doc).get("model"))
        names.append(MODEL_NAMES.get(m, f"{Path(m).stem} (graph)" if m.startswith("graph:") else m))
    return list(dict.fromkeys(sorted(names)))


def ran_cell(rec):
    o, t = set(rec.oomlab), torch_tags(rec)
    parts = []
    if o or t:
        parts.append(plural(len(o), "oomlab configuration") + (f" ({', '.join(models(rec))})" if o else ""))
        parts += [plural(len(t), "PyTorch configuration"), plural(len(o & t), "pair") + " (one tag, one call)"]
    if rec.meta:
        parts.append(plural(len(rec.meta), "meta-device prediction"))
    if len(rec.runs) > 1:
        parts.append(f"{len(rec.runs)} calls ({', '.join(rec.runs)})")
    rounds = [p["repeated"] for p in points_json(rec).values()
              if isinstance(p, dict) and isinstance(p.get("repeated"), dict)]
    if rounds:
        verdicts = sorted({str(r.get("verdict")) for r in rounds})
        n = max((len(r.get("rounds") or []) for r in rounds), default=0)
        parts.append(f"{plural(len(rounds), 'configuration')} repeated in up to {n} rounds against PyTorch "
                     f"(verdicts: {', '.join(verdicts)})")
    return "; ".join(parts) or "no oomlab or PyTorch configurations (tests only)"


def record_table(rec, shown_dir):
    folder = repo_link(f"{shown_dir}/gpu/{rec.name}")
    readme = f"{folder}/README.md" if (rec.folder / "README.md").is_file() else folder
    started = run_started(rec.folder)
    rows = [["GPU", gpu_cell(rec)], ["commit", commit_cell(rec, folder)],
            ["run started", f"{started.shown}; from {started.source}"],
            ["made by", (rec.prov or {}).get("source") or MISSING],
            ["tests", tests_cell(rec)], ["sanitizers", sanitizers_cell(rec)], ["ran", ran_cell(rec)]]
    if rec.problems:
        rows.append(["unreadable", "; ".join(rec.problems)])
    return [f"### `{rec.name}`\n", md_table(["record", f"[{rec.name}/README.md]({readme})"], rows, right=set())]


# ---- the section ---------------------------------------------------------------------------------

def render_gpu_section(gpu_dir, shown_dir="reports/results"):
    gpu_dir = Path(gpu_dir)
    folders = newest_first(d for d in gpu_dir.iterdir() if d.is_dir()) if gpu_dir.is_dir() else []
    if not folders:
        return None
    recs = [load_record(f) for f in folders]
    gone = superseded(recs)
    parts = ['<a id="gpu-results"></a>\n## GPU results\n',
             f"The GPU records committed under `{shown_dir}/gpu/`, one folder per GPU session as the session "
             "left it, plus a `provenance.json` (checked by `scripts/check_results.py`); newest run first, by "
             "the run's start. Each table says what the record is and what it ran; the record's `README.md` "
             "(linked) holds its figures: tests, oomlab beside PyTorch, the meta device's peaks beside CUDA's. "
             "The experiments' GPU tables above each name the record they read: the newest run holding every "
             "configuration of the table. A record is superseded when a later run on the same GPU model ran "
             "everything it ran (every oomlab and PyTorch configuration, test binary and sanitizer); "
             "superseded records are listed at the end, not tabulated.\n"]
    for rec in recs:
        if rec.name not in gone:
            parts += record_table(rec, shown_dir)
    if gone:
        parts.append("#### Superseded records\n")
        lines = []
        for rec in recs:
            if rec.name in gone:
                folder = repo_link(f"{shown_dir}/gpu/{rec.name}")
                lines.append(f"- [`{rec.name}`]({folder}/README.md): {gpu_of(rec) or MISSING}, run "
                             f"{run_started(rec.folder).shown}; `{gone[rec.name]}` ran all of it later.")
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)
