"""Tailored report sections, one renderer per experiment: render_NN(doc, out_dir) returns
(markdown, [figure paths relative to out_dir]); RENDERERS / EXPECTED_FIGURES map
experiment names to them (make_report.py falls back to render_generic)."""
import matplotlib.pyplot as plt

from check_results import is_num
from report_accumulation import render_07
from report_allreduce import render_10
from report_amp import render_05
from report_checkpointing import render_06
from report_data_parallel import render_11
from report_lr_scaling import render_13
from report_oom_recovery import render_08
from report_syncbn import render_12
from report_tricks import render_09
from report_format import (details, fmt_bytes, fmt_count, fmt_ratio, md_table,
                           points_table, save_fig_atomic)


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


# ---- 03_resnet20_fashion_mnist ------------------------------------------------------------

def plot_03(doc, path):
    eps = doc["summary"]["epochs"]
    x = [e["epoch"] + 1 for e in eps]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(x, [100 * e["test_accuracy"] for e in eps], "o-", label="test accuracy (ours)")
    ax.plot(x, [100 * e["train_accuracy"] for e in eps], "s--", alpha=0.7,
            label="train accuracy (ours, running)")
    src = doc["source"]
    if is_num(src.get("target_test_accuracy")):
        ax.axhline(100 * src["target_test_accuracy"], color="#C44E52", ls=":",
                   label=f"target {100 * src['target_test_accuracy']:.0f}%")
    for name, v in (src.get("anchors") or {}).items():
        ax.axhline(100 * v, color="grey", ls="-.", lw=0.8, alpha=0.6)
        ax.text(x[0], 100 * v + 0.1, f"{name} {100 * v:.1f}%", fontsize=7, color="grey")
    ax.set_xlabel("epoch")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(80, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"{doc['experiment']}: accuracy per epoch", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render_03(doc, out_dir):
    src, summ = doc["source"], doc["summary"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n"]
    anchors = src.get("anchors") or {}
    rows = [[k, f"{100 * v:.1f}%"] for k, v in anchors.items()]
    rows.append(["target (this project)", f"{100 * src['target_test_accuracy']:.0f}% within "
                 f"{src['target_epochs']} epochs"])
    parts.append(md_table(["model", "Fashion-MNIST test accuracy"], rows))
    parts.append("\n### Ours\n")
    tc = summ.get("train_config", {})
    parts.append(f"ResNet-20, batch {tc.get('batch')}, {tc.get('optimizer')} lr {tc.get('lr')} "
                 f"momentum {tc.get('momentum')} weight decay {tc.get('weight_decay')}, schedule "
                 f"{tc.get('schedule')}, seed {tc.get('seed')}; {summ['epochs_run']} epoch(s), "
                 f"{summ['images_per_s']:.0f} images/s (median step "
                 f"{1e3 * summ['step_time_s']['median']:.0f} ms) on {doc['context'].get('cpu', 'cpu')}"
                 f" × {doc['context'].get('num_cpus', '?')}.\n")
    rows = [[e["epoch"] + 1, f"{e['train_loss']:.4f}", f"{100 * e['train_accuracy']:.2f}%",
             f"{e['test_loss']:.4f}", f"{100 * e['test_accuracy']:.2f}%"] for e in summ["epochs"]]
    parts.append(md_table(["epoch", "train loss", "train acc.", "test loss", "test acc."], rows))
    fig = "figures/03_resnet20_fashion_mnist.png"
    plot_03(doc, out_dir / fig)
    parts.append(f"![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


# ---- 04_transformer_activation_memory -----------------------------------------------------

def plot_04(doc, path):
    by_model = {}
    for m in doc["summary"]["rows"]:
        by_model.setdefault(m["model"], []).append(m)
    fig, axes = plt.subplots(1, len(by_model), figsize=(5.2 * len(by_model), 4.2), squeeze=False)
    for ax, (model, ms) in zip(axes[0], by_model.items()):
        ms.sort(key=lambda m: m["seq"])
        s = [m["seq"] for m in ms]
        mib = 2**20
        ax.plot(s, [m["saved_bytes_per_layer"] / mib for m in ms], "o-", label="measured (fp32)")
        ax.plot(s, [m["korthikanti_fp32_bytes"] / mib for m in ms], "s--", mfc="none",
                label="sbh(66 + 9as/h), fp32")
        ax.plot(s, [m["korthikanti_fp16_bytes"] / mib for m in ms], "^:",
                label="sbh(34 + 5as/h), paper fp16")
        ax.plot(s, [m["linear_term_bytes"] / mib for m in ms], "-", color="grey", alpha=0.5,
                label="fp32 linear part 66sbh")
        if all("attention_core_saved_bytes" in m for m in ms):
            ax.plot(s, [m["attention_core_saved_bytes"] / mib for m in ms], "d-.",
                    label="measured attention.self.core row")
        ax.set_title(f"{model} (h={ms[0]['hidden']}, a={ms[0]['heads']}, b={ms[0]['batch']})")
        ax.set_xlabel("sequence length s")
        ax.set_ylabel("activation bytes per layer (MiB)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{doc['experiment']}: saved-for-backward bytes per encoder layer", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render_04(doc, out_dir):
    src = doc["source"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n",
             f"```\nfp16 (paper): {src.get('formula_fp16')}\nfp32 (ours):  {src.get('formula_fp32')}\n```\n",
             "\n### Ours\n",
             "Measured on the meta device with saved-tensor hooks (each storage counted once); "
             "every encoder layer of a model saves the same bytes.\n"]
    rows = []
    pts = doc["summary"]["rows"]

    def pct(m, key):
        return f"{100 * m[key]:.1f}%" if is_num(m.get(key)) else "n/a"
    for m in pts:
        core = m.get("attention_core_saved_bytes")
        rows.append([m["model"], m["seq"], m["batch"], fmt_bytes(m["saved_bytes_per_layer"]),
                     fmt_bytes(m["korthikanti_fp32_bytes"]), f"{m['measured_over_fp32_formula']:.4f}",
                     fmt_bytes(m["korthikanti_fp16_bytes"]), f"{m['measured_over_fp16_formula']:.2f}×",
                     fmt_bytes(core) if is_num(core) else "n/a", pct(m, "seq_squared_share"),
                     fmt_bytes(m["training_peak_bytes"])])
    parts.append(md_table(["model", "s", "b", "measured / layer", "fp32 formula", "measured ÷ fp32",
                           "paper fp16", "measured ÷ fp16", "attention core / layer", "seq² share",
                           "training peak (AdamW)"],
                          rows, right=set(range(1, 11))))
    parts.append("*attention core / layer*: the measured saved bytes of the layer's own "
                 "`attention.self.core` row in `oomlab summary` (QK^T, masked softmax, dropout on the "
                 "probabilities, PV: the head-layout copies of q, k, v plus the seq²-sized softmax output, "
                 "dropout mask and dropped probabilities). *seq² share*: the s² part of those measured rows "
                 "(the s² coefficient of a quadratic through the core's bytes over the sweep) over the "
                 "layer's measured bytes.\n")
    # The residual sentence only where every point shows it.
    res = [m.get("residual_over_fp32_formula_bytes",
                 m["saved_bytes_per_layer"] - m["korthikanti_fp32_bytes"]) for m in pts]
    if pts and all(r == m["layernorm_stats_bytes"] for r, m in zip(res, pts)):
        parts.append("The residual over the fp32 formula equals 16·s·b bytes per layer at every point: "
                     "layer_norm's saved mean and rstd (2 LayerNorms × 2 floats × 4 bytes per token), which "
                     "the paper does not count. An fp16 activation run (the AMP experiment, not measured yet) "
                     "should land on the paper's figure plus 16·s·b.\n")
    elif pts:
        parts.append(f"The residual over the fp32 formula is {min(res):+,} to {max(res):+,} bytes per layer; "
                     "it is not layer_norm's saved mean and rstd (16·s·b) alone at every point.\n")
    fig = "figures/04_transformer_activation_memory.png"
    plot_04(doc, out_dir / fig)
    parts.append(f"![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


RENDERERS = {"01_vgg16_memory": render_01, "02_memory_vs_batch": render_02,
             "03_resnet20_fashion_mnist": render_03, "04_transformer_activation_memory": render_04,
             "05_amp": render_05, "06_checkpointing": render_06, "07_accumulation_bn": render_07,
             "08_oom_recovery": render_08, "09_practical_tricks": render_09, "10_allreduce": render_10,
             "11_data_parallel": render_11, "12_syncbn": render_12, "13_lr_scaling": render_13}
EXPECTED_FIGURES = {name: [f"figures/{name}.png"] for name in RENDERERS}
