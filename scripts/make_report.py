#!/usr/bin/env python3
"""Turn oomlab results (reports/results/*.json) into figures and REPORT.md.

The report opens with the verdict rule (oomlab_report/verdict_rule.py, which states what
experiments/runner/verdict_rule.h applies; docs/VERDICTS.md explains it) and an index of every
experiment (title, device, profile, points and run time of its results, verdict, commit); then,
per experiment: the claim, the source's figures, ours, the figures, the verdict with its reason,
and the results file's provenance. An experiment with GPU claims (its spec's gpu_claims) shows
its GPU points from the newest GPU record holding its gpu profile (oomlab_report/gpu_results.py)
with a figure of its GPU claims, figures/NN_name_gpu.png (oomlab_report/gpu_figure.py; drawn,
and listed by --expected-figures, only when such a record exists), and its verdict over both,
or says no record holds them yet. Each experiment folder (experiments/NN_name/, discovered:
oomlab_report/experiments.py) renders its own section with its report.py; a results file
without one gets the generic section (the points table), and an experiment not run yet gets
a note. Verdict statuses are shown as text (bold), "pending GPU" included. A present but
invalid results file, a summary its folder's schema rejects, or a broken report.py is an
error (exit 1, nothing written). The report cites only files of the repository: the results'
old citations of the planning documents become links to docs/ (fmt.cite_links), and links are
relative to reports/ (tests/test_report_links.py checks that each link and each path named
exists). Outputs are written atomically and deterministically (no timestamps), so
regenerating from unchanged results is a no-op. The GPU records committed under the results
folder's gpu/ (one folder per GPU session, with its provenance.json) are listed after the
experiments in a "GPU results" appendix, one short table per record, newest run first, the
superseded ones linked only (oomlab_report/gpu_section.py), which the intro points to; without
a gpu/ folder there is no such section.
Usage: make_report.py [--results DIR] [--out DIR] [--experiments DIR] [--expected-figures]
"""
import argparse
import os
import sys
from pathlib import Path

from oomlab_report.atomic import write_text_atomic
from oomlab_report.experiments import DEFAULT_DIR, ExperimentError, discover
from oomlab_report.fmt import cite_links, fmt_num, md_table, render_generic
from oomlab_report import gpu_figure, gpu_results
from oomlab_report.gpu_section import render_gpu_section
from oomlab_report.provenance import EXCEPTIONS_FILE
from oomlab_report.results import REPO_ROOT, ResultsError, load_results
from oomlab_report.verdict_rule import rule_paragraph

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401  (availability check; the renderers draw)
except ImportError:  # e.g. a pyenv python3 shadowing the distro one that has matplotlib
    if os.path.exists("/usr/bin/python3") and not os.environ.get("OOMLAB_REPORT_REEXEC"):
        print("make_report: matplotlib missing in " + sys.executable + "; retrying with "
              "/usr/bin/python3", file=sys.stderr)
        os.environ["OOMLAB_REPORT_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3", os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit("make_report: matplotlib is required (apt-get install python3-matplotlib, "
             "see scripts/setup.sh)")


# ---- report ---------------------------------------------------------------------------------

def provenance_line(doc):
    c = doc["context"]
    return (f"<sub>Provenance: host `{c['host']}`, device `{c['device']}`, git `{c['git_sha']}`, "
            f"{c['build_type']} build ({c['compiler']}, {c['blas']}), oomlab {c['oomlab_version']}, "
            f"{c['date']}, profile `{doc['config'].get('profile')}`.</sub>\n")


def fmt_seconds(s):
    if not isinstance(s, (int, float)):
        return ""
    if s < 60:
        return f"{s:.0f} s"
    return f"{s / 60:.0f} min" if s < 3600 else f"{s / 3600:.1f} h"


def devices_of(doc):
    """The device kinds the points ran on (the spec's default and each point's own)."""
    default = doc["config"].get("device", "cpu")
    kinds = [str(p.get("options", {}).get("device", default)).split(":")[0] for p in doc["points"]]
    return " + ".join(dict.fromkeys(kinds or [default.split(":")[0]]))


def has_gpu_claims(exp):
    return bool(exp and exp.spec.get("gpu_claims"))


def verdict_cell(doc, exp, gpu):
    """The index's verdict: the status over the CPU / meta and GPU verdicts (gpu_results)."""
    cpu = doc["verdict"]["status"]
    if not has_gpu_claims(exp):
        return f"**{cpu}**"
    gpu_status = gpu.doc["verdict"]["status"] if gpu else None
    both = gpu_results.combined_status(cpu, gpu_status)
    return f"**{both}** (CPU/meta: {cpu}; GPU: {gpu_status or 'no GPU record yet'})"


def index_row(name, doc, exp, gpu=None):
    title = (doc["config"].get("title") if doc else None) or (exp.title if exp else "")
    if doc is None:
        return [f"[{name}](#{name})", title, exp.spec.get("device", "cpu"), "_not run yet_", "", ""]
    seconds = sum(p["outcome"]["seconds"] for p in doc["points"])
    ran = f"{doc['config'].get('profile')}: {len(doc['points'])} points, {fmt_seconds(seconds)}"
    if gpu:
        gpu_s = sum(p["outcome"]["seconds"] for p in gpu.doc["points"])
        ran += f"; gpu: {len(gpu.doc['points'])} points, {fmt_seconds(gpu_s)}"
    return [f"[{name}](#{name})", title, devices_of(doc) + (" + " + devices_of(gpu.doc) if gpu else ""), ran,
            verdict_cell(doc, exp, gpu), doc["context"]["git_sha"]]


def render_section(name, doc, exp, out_dir, results_dir, gpu=None):
    """The section's markdown and the figures it drew."""
    title = (doc["config"].get("title") if doc else None) or (exp.title if exp else "")
    lines = [f"<a id=\"{name}\"></a>\n## {name}" + (f": {title}" if title else "") + "\n"]
    claim = (doc["config"].get("claim") if doc else None) or (exp.spec.get("claim") if exp else None)
    if claim:
        lines.append(f"**Claim.** {claim}\n")
    if doc is None:
        lines.append(f"_No results yet: run `oomlab run experiments/{name}` to produce "
                     f"`{results_dir}/{name}.json`._\n")
        return lines, []
    if exp is None:
        lines.append(f"_No `experiments/{name}` folder; shown from its results file alone._\n")
    renderer = exp.renderer() if exp else None
    body, figs = renderer.render(doc, out_dir) if renderer else render_generic(doc, out_dir)
    missing = set(exp.figures() if exp else []) - set(figs)
    if missing:
        raise ExperimentError(f"{exp.report_path}: render() did not draw {sorted(missing)}")
    lines.append(body)
    v = doc["verdict"]
    if has_gpu_claims(exp):
        both = gpu_results.combined_status(v["status"], gpu.doc["verdict"]["status"] if gpu else None)
        lines.append(f"### Verdict: **{both}**\n\nCPU / meta points: **{v['status']}**. {v['reason']}\n")
        gpu_fig = gpu_figure.draw(name, gpu, out_dir, exp.spec.get("gpu_claims", [])) if gpu else None
        figs = figs + ([gpu_fig] if gpu_fig else [])
        lines.append(gpu_results.section(name, gpu, results_dir, gpu_fig))
    else:
        lines.append(f"### Verdict: **{v['status']}**\n\n{v['reason']}\n")
    lines.append(provenance_line(doc))
    return lines, figs


def provenance_table(results):
    order = ("host", "device", "git_sha", "date", "build_type", "compiler", "blas", "oomlab_version")
    keys = list(dict.fromkeys(list(order) + [k for d in results.values() for k in d["context"]]))
    return ["## Provenance of the results files\n",
            md_table(["file"] + keys, [[f"`{n}.json`"] + [fmt_num(results[n]["context"].get(k)) for k in keys]
                                       for n in sorted(results)], right=set())]


def build_report(results, experiments, out_dir, results_dir, gpu_section=None, gpu_dir=None, exp_dir=None):
    names = sorted(set(results) | set(experiments))
    gpus = {n: gpu_results.newest(n, gpu_dir, exp_dir) if gpu_dir and has_gpu_claims(experiments.get(n)) else None
            for n in names}
    lines = ["# oomlab report\n",
             f"Generated by `scripts/make_report.py` from `{results_dir}/*.json`; do not edit by "
             "hand. Each section puts the source material's figure next to ours, with a verdict. "
             "Each experiment is a folder of `experiments/`; `oomlab run experiments/NAME` "
             "reruns it.\n",
             rule_paragraph(f"{Path(results_dir).parent.as_posix()}/{EXCEPTIONS_FILE}")]
    if gpu_section:
        lines.append(f"The GPU records (`{results_dir}/gpu/`) follow the experiments: "
                     "[GPU results](#gpu-results).\n")
    if names:
        lines.append(md_table(["experiment", "title", "device", "results (profile: points, their run time)",
                               "verdict", "git"],
                              [index_row(n, results.get(n), experiments.get(n), gpus[n]) for n in names],
                              right=set()))
    else:
        lines.append("_No experiments and no results found._\n")
    figures = []
    for name in names:
        section, figs = render_section(name, results.get(name), experiments.get(name), out_dir, results_dir, gpus[name])
        lines += section
        figures += figs
    if results:
        lines += provenance_table(results)
    if gpu_section:
        lines.append(gpu_section)
    return cite_links("\n".join(lines)), figures


def load_all(files, exp_dir):
    """{stem: document}; every error collected (ResultsError messages)."""
    results, errors = {}, []
    for f in files:
        try:
            results[f.stem] = load_results(f, exp_dir)
        except ResultsError as exc:
            errors.append(str(exc))
    return results, errors


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(REPO_ROOT / "reports" / "results"),
                    help="directory of results JSON files (default: reports/results)")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports"),
                    help="output directory for REPORT.md and figures/ (default: reports)")
    ap.add_argument("--experiments", default=str(DEFAULT_DIR),
                    help="the experiment folders (default: experiments/)")
    ap.add_argument("--expected-figures", action="store_true",
                    help="print the figures (relative to --out) the results require, and exit")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    results_dir, out_dir, exp_dir = Path(args.results), Path(args.out), Path(args.experiments)
    files = sorted(results_dir.glob("*.json")) if results_dir.is_dir() else []
    try:
        experiments = discover(exp_dir)
        if args.expected_figures:
            for f in files:
                exp = experiments.get(f.stem)
                for fig in exp.figures() if exp else []:
                    print(fig)
                if has_gpu_claims(exp) and gpu_results.newest(f.stem, results_dir / "gpu", exp_dir):
                    print(gpu_figure.figure_path(f.stem))
            return 0
        if not results_dir.is_dir():
            print(f"make_report: note: no results directory {results_dir}; report lists experiments only")
        results, errors = load_all(files, exp_dir)
        for e in errors:
            print(f"make_report: error: {e}", file=sys.stderr)
        if errors:
            return 1
        for name in sorted(set(experiments) - set(results)):
            print(f"make_report: note: no results for {name}; skipped")
        try:
            shown = results_dir.resolve().relative_to(REPO_ROOT).as_posix()
        except ValueError:
            shown = str(results_dir)
        gpu = render_gpu_section(results_dir / "gpu", shown)
        text, figures = build_report(results, experiments, out_dir, shown, gpu, results_dir / "gpu", exp_dir)
    except ExperimentError as exc:
        print(f"make_report: error: {exc}", file=sys.stderr)
        return 1
    write_text_atomic(out_dir / "REPORT.md", text)
    print(f"make_report: wrote {out_dir / 'REPORT.md'} ({len(results)} results, "
          f"{len(figures)} figures: {', '.join(figures) or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
