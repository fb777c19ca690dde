#!/usr/bin/env python3
"""Turn oomlab results (reports/results/*.json) into figures and REPORT.md.

For each experiment: the claim, the source's figures, ours, the figure, the verdict with
its reason, and the results file's provenance (host, device, git sha, date). Experiments
with a renderer (01_vgg16_memory, 02_memory_vs_batch) get tailored tables and a figure
(figures/<experiment>.png); any other results file gets a generic section (points table);
experiments under experiments/ with no results yet get a note. A present but invalid
results file is an error (exit 1, nothing written). Outputs are written atomically.
Output is deterministic (no timestamps), so regenerating from unchanged results is a no-op.
Usage: make_report.py [--results DIR] [--out DIR] [--experiments DIR] [--expected-figures]
"""
import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_results import ResultsError, is_num, load_results  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # e.g. a pyenv python3 shadowing the distro one that has matplotlib
    if os.path.exists("/usr/bin/python3") and not os.environ.get("OOMLAB_REPORT_REEXEC"):
        print("make_report: matplotlib missing in " + sys.executable + "; retrying with "
              "/usr/bin/python3", file=sys.stderr)
        os.environ["OOMLAB_REPORT_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3", os.path.abspath(__file__)] + sys.argv[1:])
    sys.exit("make_report: matplotlib is required (apt-get install python3-matplotlib, "
             "see scripts/setup.sh)")


# ---- formatting --------------------------------------------------------------------------

def fmt_bytes(b):
    """Bytes in B/KiB/MiB/GiB (binary units, as PyTorch's memory tooling prints them)."""
    if not is_num(b):
        return "—"
    sign, b = ("-" if b < 0 else ""), abs(b)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            v = b / scale
            return f"{sign}{v:.2f} {unit}" if v < 100 else f"{sign}{v:.1f} {unit}"
    return f"{sign}{b:.0f} B"


def fmt_count(n):
    if not is_num(n):
        return "—"
    return f"{n:,.0f}" if float(n).is_integer() or abs(n) >= 1000 else f"{n:.4g}"


def fmt_num(x, key=""):
    """Format a metric value; byte-valued keys (…bytes…) in MiB/GiB."""
    if isinstance(x, bool) or x is None:
        return str(x).lower() if isinstance(x, bool) else "—"
    if is_num(x):
        if "bytes" in key:
            return fmt_bytes(x)
        if isinstance(x, int) or (abs(x) >= 1000 and float(x).is_integer()):
            return f"{x:,}" if isinstance(x, int) else f"{x:,.0f}"
        return f"{x:.4g}"
    if isinstance(x, str):
        return x
    text = json.dumps(x)
    return text if len(text) <= 60 else text[:57] + "..."


def fmt_ratio(a, b, digits=2):
    return f"{a / b:.{digits}f}×" if is_num(a) and is_num(b) and b else "—"


def cell(x):
    return str(x).replace("|", "\\|").replace("\n", "<br>")


def md_table(headers, rows, right=None):
    """Markdown table; `right` = indices of right-aligned (numeric) columns."""
    right = set(range(1, len(headers)) if right is None else right)
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |",
             "|" + "|".join("---:" if i in right else ":---" for i in range(len(headers))) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def details(summary, body):
    return f"<details><summary>{summary}</summary>\n\n{body}\n</details>\n"


# ---- atomic output -------------------------------------------------------------------------

def _umask_mode():
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_text_atomic(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, _umask_mode())  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def save_fig_atomic(fig, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=110, metadata={"Software": None})
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        plt.close(fig)


# ---- generic pieces ---------------------------------------------------------------------

def scalar_items(d):
    return [(k, v) for k, v in d.items() if not isinstance(v, (dict, list))]


def render_mapping(d, depth=0):
    """Best-effort markdown for an arbitrary source/summary object."""
    out = []
    for key, value in d.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            cols = list(dict.fromkeys(k for v in value for k in v))
            rows = [[fmt_num(v.get(c), c) for c in cols] for v in value]
            out.append(f"\n**{key}**\n\n" + md_table(cols, rows, right=set()))
        elif isinstance(value, list):
            out.append(f"- **{key}**: " + ", ".join(fmt_num(v, key) for v in value))
        elif isinstance(value, dict) and len(value) > 12:  # e.g. a full memory-stats block
            rows = [[k, fmt_num(v, k if "bytes" in k else key)] for k, v in value.items()]
            out.append("\n" + details(f"{key} ({len(value)} entries)",
                                       md_table(["key", "value"], rows)))
        elif isinstance(value, dict) and depth < 2:
            out.append(f"- **{key}**:\n" + "\n".join("  " + line for line in
                                                      render_mapping(value, depth + 1).splitlines()))
        else:
            out.append(f"- **{key}**: {fmt_num(value, key)}")
    return "\n".join(out) + "\n"


def points_table(doc):
    points = doc["points"]
    metric_cols = list(dict.fromkeys(k for p in points for k, v in p["metrics"].items()
                                     if not isinstance(v, (dict, list))))
    mem_cols = [k for k in ("allocated_bytes.all.peak", "reserved_bytes.all.peak")
                if any(k in p["memory"] for p in points)]
    rows = [[p["name"]] + [fmt_num(p["metrics"].get(c), c) for c in metric_cols] +
            [fmt_bytes(p["memory"].get(c)) for c in mem_cols] for p in points]
    return md_table(["point"] + metric_cols + mem_cols, rows)


def render_generic(doc, out_dir):
    parts = ["### Source\n\n" + render_mapping(doc["source"]) if doc["source"] else
             "### Source\n\n_No source figures recorded._\n"]
    parts.append("### Ours\n")
    if doc["summary"]:
        parts.append(render_mapping(doc["summary"]))
    parts.append(points_table(doc) if doc["points"] else "_No points._\n")
    return "\n".join(parts), []


# ---- 01_vgg16_memory -----------------------------------------------------------------------

def shape_str(shape):
    return "×".join(str(d) for d in shape) if isinstance(shape, list) else "—"


def plot_01(doc, path):
    layers = doc["summary"]["layers"]
    n = len(layers)
    x = list(range(n))
    fig, ax = plt.subplots(figsize=(max(8.0, 0.38 * n), 5.2))
    w = 0.4
    vals = [max(l["output_values"], 0) or float("nan") for l in layers]
    params = [l["params"] if l["params"] > 0 else float("nan") for l in layers]
    ax.bar([i - w / 2 for i in x], vals, w, label="output values per image", color="#4C72B0")
    ax.bar([i + w / 2 for i in x], params, w, label="parameters", color="#DD8452")
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([l["name"] if l["type"].lower() in l["name"].lower() else
                        f"{l['name']} ({l['type']})" for l in layers],
                       rotation=70, ha="right", fontsize=8)
    ax.set_ylabel("count (log scale)")
    t = doc["summary"]["totals"]
    ax.set_title(f"{doc['experiment']}: per-layer activations and parameters "
                 f"(total {t['activation_values_per_image'] / 1e6:.2f}M values/image, "
                 f"{t['params'] / 1e6:.2f}M params)", fontsize=10)
    ax.grid(axis="y", which="major", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render_01(doc, out_dir):
    src, summ = doc["source"], doc["summary"]
    totals, stotals = summ["totals"], src.get("totals", {})
    parts = ["### Source\n"]
    if src.get("citation"):
        parts.append(f"{src['citation']}\n")
    slayers = src.get("layers") or []
    if slayers:
        rows = [[i, l.get("name", ""), shape_str(l.get("output_shape")),
                 fmt_count(l.get("output_values")), fmt_count(l.get("params"))]
                for i, l in enumerate(slayers)]
        rows.append(["", "**sum of rows**", "",
                     fmt_count(sum(l.get("output_values", 0) for l in slayers)),
                     fmt_count(sum(l.get("params", 0) for l in slayers))])
        parts.append(details(f"Source table ({len(slayers)} rows)",
                             md_table(["#", "layer", "output (C×H×W)", "values", "params"], rows,
                                      right={0, 3, 4})))
    for note in src.get("notes", []):
        parts.append(f"- {note}")
    parts.append("\n### Ours\n")
    bpv = src.get("bytes_per_value", 4)
    fwd_src = stotals.get("forward_only_bytes_per_image")
    tof_src = stotals.get("training_over_forward")
    train_src = fwd_src * tof_src if is_num(fwd_src) and is_num(tof_src) else None
    act_bytes = totals.get("activation_bytes_per_image",
                           totals["activation_values_per_image"] * bpv)
    times = lambda v: f"{v:.2f}×" if is_num(v) else "—"  # noqa: E731
    comp = [
        ("activation values / image", stotals.get("activation_values_per_image"),
         totals["activation_values_per_image"], fmt_count,
         stotals.get("activation_values_per_image_text")),
        ("activation values / image (sum of the source's rows)",
         stotals.get("table_row_sum_activation_values"), totals["activation_values_per_image"],
         fmt_count, None),
        ("parameters", stotals.get("params"), totals["params"], fmt_count, stotals.get("params_text")),
        ("activation memory / image (values × bytes)", fwd_src, act_bytes, fmt_bytes,
         stotals.get("forward_only_bytes_per_image_text")),
        ("forward-only memory / image (measured peak slope)", fwd_src,
         totals["forward_only_bytes_per_image"], fmt_bytes, None),
        ("training memory / image (measured peak slope)", train_src,
         totals["training_bytes_per_image"], fmt_bytes,
         "forward × stated factor" if train_src is not None else None),
        ("training ÷ forward-only", tof_src, totals["training_over_forward"], times, None),
    ]
    if is_num(totals.get("training_over_activations")):
        comp.append(("training ÷ activation memory", tof_src, totals["training_over_activations"],
                     times, None))
    rows = [[q, f(s) + (f" ({t})" if t else ""), f(o), fmt_ratio(o, s)] for q, s, o, f, t in comp]
    parts.append(md_table(["quantity", "source", "ours", "ours ÷ source"], rows))
    lrows = [[i, l["name"], l["type"], shape_str(l["output_shape"]), fmt_count(l["output_values"]),
              fmt_bytes(l.get("output_bytes", l["output_values"] * bpv)), fmt_count(l["params"]),
              fmt_bytes(l["saved_bytes"])]
             for i, l in enumerate(summ["layers"])]
    lrows.append(["", "**total**", "", "", fmt_count(sum(l["output_values"] for l in summ["layers"])),
                  fmt_bytes(sum(l.get("output_bytes", l["output_values"] * bpv)
                                for l in summ["layers"])),
                  fmt_count(sum(l["params"] for l in summ["layers"])),
                  fmt_bytes(sum(l["saved_bytes"] for l in summ["layers"]))])
    parts.append(details(f"Our per-layer table ({len(summ['layers'])} layers, one image)",
                         md_table(["#", "layer", "type", "output (C×H×W)", "values", "output bytes",
                                   "params", "saved for backward"], lrows, right={0, 4, 5, 6, 7})))
    if doc["points"]:
        parts.append(details(f"Measured points ({len(doc['points'])})", points_table(doc)))
    fig = "figures/01_vgg16_memory.png"
    plot_01(doc, out_dir / fig)
    parts.append(f"![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


# ---- 02_memory_vs_batch ---------------------------------------------------------------------

def _series_02(doc):
    series = {}
    for p in doc["points"]:
        m = p["metrics"]
        series.setdefault(m["model"], {}).setdefault(m["optimizer"], []).append(m)
    for by_opt in series.values():
        for pts in by_opt.values():
            pts.sort(key=lambda m: m["batch"])
    return series


def plot_02(doc, series, path):
    models = list(series)
    fig, axes = plt.subplots(1, max(1, len(models)), figsize=(5.0 * max(1, len(models)), 4.4),
                             squeeze=False)
    colors = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860"]
    for ax, model in zip(axes[0], models):
        peak = max(max(m["peak_allocated_bytes"], m["formula_bytes"])
                   for pts in series[model].values() for m in pts)
        unit, scale = ("GiB", 2**30) if peak >= 2**30 else ("MiB", 2**20)
        for k, (opt, pts) in enumerate(series[model].items()):
            c = colors[k % len(colors)]
            b = [m["batch"] for m in pts]
            ax.plot(b, [m["peak_allocated_bytes"] / scale for m in pts], "o-", color=c,
                    label=f"{opt}: measured peak")
            ax.plot(b, [m["formula_bytes"] / scale for m in pts], "s--", color=c, alpha=0.7,
                    mfc="none", label=f"{opt}: source formula")
        ax.set_title(model)
        ax.set_xlabel("batch size")
        ax.set_ylabel(f"peak allocated ({unit})")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{doc['experiment']}: training peak memory vs batch (measured vs formula)",
                 fontsize=11)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render_02(doc, out_dir):
    src = doc["source"]
    parts = ["### Source\n"]
    if src.get("citation"):
        parts.append(f"{src['citation']}\n")
    if src.get("formula"):
        parts.append(f"```\n{src['formula']}\n```\n")
    mult = src.get("param_multiplier") or {}
    if mult:
        parts.append(md_table(["optimizer", "parameter multiplier n"],
                              [[k, v] for k, v in mult.items()]))
    if src.get("outputs_multiplier") is not None:
        parts.append(f"Layer-output multiplier: ×{src['outputs_multiplier']} (value + gradient).\n")
    for claim in src.get("claims", []):
        parts.append(f"- {claim}")
    parts.append("\n### Ours\n")
    series = _series_02(doc)
    params_of = {m: next(iter(o.values()))[0]["params_bytes"] for m, o in series.items()}
    frows = []
    for f in doc["summary"]["fits"]:
        pb = params_of.get(f["model"])
        n_src = mult.get(f["optimizer"])
        frows.append([f["model"], f["optimizer"], fmt_bytes(f["static_bytes"]),
                      fmt_bytes(f["formula_static_bytes"]),
                      (f"{f['static_bytes'] / pb:.2f}" if pb else "—") +
                      (f" (source {n_src})" if n_src is not None else ""),
                      fmt_bytes(f["per_sample_bytes"]), fmt_bytes(f["formula_per_sample_bytes"]),
                      fmt_ratio(f["per_sample_bytes"], f["formula_per_sample_bytes"]),
                      f"{f['r2']:.5f}" if is_num(f.get("r2")) else "—"])
    parts.append("Linear fit of the measured peak, `peak = static + batch × per_sample`, against "
                 "the formula's terms:\n")
    parts.append(md_table(["model", "optimizer", "static (measured)", "static (formula)",
                           "static ÷ params", "per sample (measured)", "per sample (formula)",
                           "measured ÷ formula", "R² of fit"], frows, right={2, 3, 4, 5, 6, 7, 8}))
    erows = []
    for model, by_opt in series.items():
        for opt, pts in by_opt.items():
            errs = [m["formula_error_pct"] for m in pts]
            erows.append([model, opt, f"{pts[0]['batch']}–{pts[-1]['batch']}",
                          f"{errs[0]:+.1f}%", f"{errs[-1]:+.1f}%",
                          f"{max(errs, key=abs):+.1f}%"])
    parts.append("Formula error against the measured peak, (formula − measured) ÷ measured:\n")
    parts.append(md_table(["model", "optimizer", "batches", "error at smallest batch",
                           "error at largest batch", "largest |error|"], erows,
                          right={3, 4, 5}))
    cols = [("peak_allocated_bytes", "measured peak"), ("formula_bytes", "formula"),
            ("formula_error_pct", "error"), ("params_bytes", "params"),
            ("buffers_bytes", "buffers"), ("grads_bytes", "grads"),
            ("optimizer_state_bytes", "optimizer state"), ("activation_bytes", "activations"),
            ("transient_bytes", "transient"), ("input_bytes", "input")]
    allm = [m for by_opt in series.values() for pts in by_opt.values() for m in pts]
    cols = [(k, h) for k, h in cols if any(k in m for m in allm)]
    prows = [[m["model"], m["optimizer"], m["batch"]] +
             [(f"{m[k]:+.1f}%" if k == "formula_error_pct" else fmt_bytes(m[k])) if k in m else "—"
              for k, _ in cols] for m in allm]
    parts.append(details(f"All points ({len(prows)})",
                         md_table(["model", "optimizer", "batch"] + [h for _, h in cols], prows,
                                  right=set(range(2, 3 + len(cols))))))
    fig = "figures/02_memory_vs_batch.png"
    plot_02(doc, series, out_dir / fig)
    parts.append(f"![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


RENDERERS = {"01_vgg16_memory": render_01, "02_memory_vs_batch": render_02}
EXPECTED_FIGURES = {"01_vgg16_memory": ["figures/01_vgg16_memory.png"],
                    "02_memory_vs_batch": ["figures/02_memory_vs_batch.png"]}


# ---- report ---------------------------------------------------------------------------------

def provenance_line(doc):
    c = doc["context"]
    return (f"<sub>Provenance: host `{c['host']}`, device `{c['device']}`, git `{c['git_sha']}`, "
            f"{c['build_type']} build ({c['compiler']}, {c['blas']}), oomlab {c['oomlab_version']}, "
            f"{c['date']}, profile `{doc['config'].get('profile')}`.</sub>\n")


def load_experiment_specs(exp_dir):
    specs = {}
    if exp_dir and exp_dir.is_dir():
        for spec in sorted(exp_dir.glob("*/experiment.json")):
            try:
                specs[spec.parent.name] = json.loads(spec.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                print(f"make_report: note: cannot read {spec}: {exc}", file=sys.stderr)
                specs[spec.parent.name] = {}
    return specs


def build_report(results, specs, out_dir, results_dir):
    names = sorted(set(results) | set(specs))
    lines = ["# oomlab report\n",
             f"Generated by `scripts/make_report.py` from `{results_dir}/*.json`; do not edit by "
             "hand. Each section puts the source material's figure next to ours, with a verdict.\n"]
    rows = []
    for name in names:
        doc, spec = results.get(name), specs.get(name, {})
        title = (doc["config"].get("title") if doc else None) or spec.get("title", "")
        rows.append([f"[{name}](#{name})", title,
                     f"**{doc['verdict']['status']}**" if doc else "_not run yet_",
                     doc["context"]["device"] if doc else "", doc["context"]["git_sha"] if doc else ""])
    if rows:
        lines.append(md_table(["experiment", "title", "verdict", "device", "git"], rows, right=set()))
    else:
        lines.append("_No experiments and no results found._\n")
    figures = []
    for name in names:
        doc, spec = results.get(name), specs.get(name, {})
        title = (doc["config"].get("title") if doc else None) or spec.get("title", "")
        lines.append(f"<a id=\"{name}\"></a>\n## {name}" + (f": {title}" if title else "") + "\n")
        claim = (doc["config"].get("claim") if doc else None) or spec.get("claim")
        if claim:
            lines.append(f"**Claim.** {claim}\n")
        if doc is None:
            lines.append(f"_No results yet: run `oomlab run experiments/{name}` to produce "
                         f"`{results_dir}/{name}.json`._\n")
            continue
        if name not in specs:
            lines.append(f"_No `experiments/{name}` folder; shown from its results file alone._\n")
        renderer = RENDERERS.get(name, render_generic)
        body, figs = renderer(doc, out_dir)
        missing = set(EXPECTED_FIGURES.get(name, [])) - set(figs)
        if missing:
            raise RuntimeError(f"renderer for {name} did not produce {sorted(missing)}")
        figures += figs
        lines.append(body)
        v = doc["verdict"]
        lines.append(f"### Verdict: **{v['status']}**\n\n{v['reason']}\n")
        lines.append(provenance_line(doc))
    if results:
        order = ("host", "device", "git_sha", "date", "build_type", "compiler", "blas",
                 "oomlab_version")
        keys = list(dict.fromkeys(list(order) + [k for d in results.values() for k in d["context"]]))
        lines.append("## Provenance of the results files\n")
        lines.append(md_table(["file"] + keys,
                              [[f"`{n}.json`"] + [fmt_num(results[n]["context"].get(k)) for k in keys]
                               for n in sorted(results)], right=set()))
    return "\n".join(lines), figures


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(REPO_ROOT / "reports" / "results"),
                    help="directory of results JSON files (default: reports/results)")
    ap.add_argument("--out", default=str(REPO_ROOT / "reports"),
                    help="output directory for REPORT.md and figures/ (default: reports)")
    ap.add_argument("--experiments", default=str(REPO_ROOT / "experiments"),
                    help="experiments directory, for the claims of not-yet-run experiments")
    ap.add_argument("--expected-figures", action="store_true",
                    help="print the figures (relative to --out) the results require, and exit")
    args = ap.parse_args(argv)
    results_dir, out_dir = Path(args.results), Path(args.out)
    files = sorted(results_dir.glob("*.json")) if results_dir.is_dir() else []
    if args.expected_figures:
        for f in files:
            for fig in EXPECTED_FIGURES.get(f.stem, []):
                print(fig)
        return 0
    if not results_dir.is_dir():
        print(f"make_report: note: no results directory {results_dir}; report lists experiments only")
    results, errors = {}, []
    for f in files:
        try:
            results[f.stem] = load_results(f)
        except ResultsError as exc:
            errors.append(str(exc))
    if errors:
        for e in errors:
            print(f"make_report: error: {e}", file=sys.stderr)
        return 1
    specs = load_experiment_specs(Path(args.experiments))
    for name in sorted(set(specs) - set(results)):
        print(f"make_report: note: no results for {name}; skipped")
    try:
        shown = results_dir.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        shown = str(results_dir)
    text, figures = build_report(results, specs, out_dir, shown)
    write_text_atomic(out_dir / "REPORT.md", text)
    print(f"make_report: wrote {out_dir / 'REPORT.md'} ({len(results)} results, "
          f"{len(figures)} figures: {', '.join(figures) or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
