"""report.py — the report section of experiment 01_vgg16_memory: the source's VGG16 per-layer
table (output values and parameters per layer) beside our per-layer recording, the totals and
the training-over-forward ratio, and one figure (per-layer output values and parameters, log
scale). An in-place layer's output (the summary's "inplace": the ReLUs write into their input's
buffer) is never allocated: its bar is drawn hatched and unfilled, labelled so, its table row
says so, and the table's total counts allocated outputs only (the summary's totals do too).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.results import is_num
from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import details, fmt_bytes, fmt_count, fmt_ratio, md_table, points_table


def shape_str(shape):
    return "×".join(str(d) for d in shape) if isinstance(shape, list) else "—"


def plot_01(doc, path):
    layers = doc["summary"]["layers"]
    n = len(layers)
    x = list(range(n))
    fig, ax = plt.subplots(figsize=(max(8.0, 0.38 * n), 5.2))
    w = 0.4
    nan = float("nan")
    vals = [max(l["output_values"], 0) or nan for l in layers]
    params = [l["params"] if l["params"] > 0 else nan for l in layers]
    inplace = [bool(l.get("inplace")) for l in layers]
    ax.bar([i - w / 2 for i in x], [nan if ip else v for v, ip in zip(vals, inplace)], w,
           label="output values per image (allocated)", color="#4C72B0")
    if any(inplace):   # the ReLU writes into its input's buffer: the bar shows a size, not memory
        ax.bar([i - w / 2 for i in x], [v if ip else nan for v, ip in zip(vals, inplace)], w,
               label="output values, in-place: not allocated", facecolor="none", edgecolor="#4C72B0",
               hatch="///", linewidth=0.8)
    ax.bar([i + w / 2 for i in x], params, w, label="parameters", color="#DD8452")
    ax.set_yscale("log")
    ax.set_xticks(x)
    ax.set_xticklabels([l["name"] if l["type"].lower() in l["name"].lower() else
                        f"{l['name']} ({l['type']})" for l in layers],
                       rotation=70, ha="right", fontsize=8)
    ax.set_ylabel("count (log scale)")
    t = doc["summary"]["totals"]
    ax.set_title(f"{doc['experiment']}: per-layer activations and parameters "
                 f"(allocated {t['activation_values_per_image'] / 1e6:.2f}M values/image, "
                 f"{t['params'] / 1e6:.2f}M params)", fontsize=10)
    ax.grid(axis="y", which="major", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
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
    parts.append("Bytes in KiB / MiB (2^10 / 2^20 bytes) on both sides; text in quotes is the source's own "
                 "wording, its units as it writes them.\n")
    bpv = src.get("bytes_per_value", 4)
    fwd_src = stotals.get("forward_only_bytes_per_image")
    tof_src = stotals.get("training_over_forward")
    train_src = fwd_src * tof_src if is_num(fwd_src) and is_num(tof_src) else None
    act_bytes = totals.get("activation_bytes_per_image",
                           totals["activation_values_per_image"] * bpv)
    times = lambda v: f"{v:.2f}×" if is_num(v) else "—"  # noqa: E731
    quoted = lambda t: f'as written: "{t}"' if t else None  # noqa: E731
    comp = [
        ("activation values / image", stotals.get("activation_values_per_image"),
         totals["activation_values_per_image"], fmt_count,
         quoted(stotals.get("activation_values_per_image_text"))),
        ("activation values / image (sum of the source's rows)",
         stotals.get("table_row_sum_activation_values"), totals["activation_values_per_image"],
         fmt_count, None),
        ("parameters", stotals.get("params"), totals["params"], fmt_count, quoted(stotals.get("params_text"))),
        ("activation memory / image (values × bytes)", fwd_src, act_bytes, fmt_bytes,
         quoted(stotals.get("forward_only_bytes_per_image_text"))),
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
    out_bytes = lambda l: l.get("output_bytes", l["output_values"] * bpv)  # noqa: E731
    lrows = [[i, l["name"], l["type"] + (" (in place)" if l.get("inplace") else ""),
              shape_str(l["output_shape"]), fmt_count(l["output_values"]), fmt_bytes(out_bytes(l)),
              fmt_count(l["params"]), fmt_bytes(l["saved_bytes"])]
             for i, l in enumerate(summ["layers"])]
    allocated = [l for l in summ["layers"] if not l.get("inplace")]
    n_inplace = len(summ["layers"]) - len(allocated)
    lrows.append(["", "**total allocated**" + (f" ({n_inplace} in-place outputs not counted)" if n_inplace else ""),
                  "", "", fmt_count(sum(l["output_values"] for l in allocated)),
                  fmt_bytes(sum(out_bytes(l) for l in allocated)),
                  fmt_count(sum(l["params"] for l in summ["layers"])),
                  fmt_bytes(sum(l["saved_bytes"] for l in summ["layers"]))])
    parts.append(details(f"Our per-layer table ({len(summ['layers'])} layers, one image)",
                         ("A layer marked _in place_ writes its output into its input's buffer: that "
                          "output is never allocated, and the total leaves it out.\n\n" if n_inplace else "") +
                         md_table(["#", "layer", "type", "output (C×H×W)", "values", "output bytes",
                                   "params", "saved for backward"], lrows, right={0, 4, 5, 6, 7})))
    if doc["points"]:
        parts.append(details(f"Measured points ({len(doc['points'])})", points_table(doc)))
    fig = "figures/01_vgg16_memory.png"
    plot_01(doc, out_dir / fig)
    parts.append(f"![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


FIGURES = ["figures/01_vgg16_memory.png"]
