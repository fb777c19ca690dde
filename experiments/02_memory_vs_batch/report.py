"""report.py — the report section of experiment 02_memory_vs_batch: the source's memory formula
and multipliers, our measured peak against batch size per model and optimizer with the linear
fits beside the formula, the formula's error, and one figure (peak against batch per model).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.results import is_num
from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import details, fmt_bytes, fmt_ratio, md_table


def _series_02(doc):
    series = {}
    for m in doc["summary"]["rows"]:
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


def render(doc, out_dir):
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


FIGURES = ["figures/02_memory_vs_batch.png"]
