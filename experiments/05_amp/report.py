"""report.py — the report section of experiment 05_amp (mixed precision): the source's
AMP table, our exact meta peaks per mode with the with/without ratios beside the source's,
model state per parameter, the --half rows (model.half() with BN float32, with and without
float32 master weights), CPU step-time ratios and the accuracy runs, and one figure of two panels: the peak ratio per
model (ours vs the source's V100 / T4) and the CPU step times (the cpu_time blocks' median step
time per amp mode off / fp16 / bf16, from the summary's cpu_time rows, each 16-bit bar labelled
with its ratio to fp32).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.results import is_num
from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table

MODES = ("off", "fp16", "bf16")
HALF_MODES = ("half", "half+master")


def memory_panel(doc, ax):
    rows = doc["summary"]["memory"]
    labels = [r["model"] for r in rows]
    width = 0.2
    series = [("ours fp16", lambda r: r.get("fp16", {}).get("peak_ratio")),
              ("ours bf16", lambda r: r.get("bf16", {}).get("peak_ratio")),
              ("source V100", lambda r: r.get("source_peak_ratio", {}).get("V100")),
              ("source T4", lambda r: r.get("source_peak_ratio", {}).get("T4"))]
    for k, (name, get) in enumerate(series):
        xs = [i + (k - 1.5) * width for i in range(len(rows))]
        ys = [get(r) if is_num(get(r)) else 0 for r in rows]
        ax.bar(xs, ys, width, label=name)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("peak memory with AMP / without")
    ax.set_title("training peak with AMP vs fp32 (ours: meta, exact)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)


MODE_STYLE = {"off": ("fp32 (amp off)", "#4C72B0"), "fp16": ("fp16 autocast", "#DD8452"),
              "bf16": ("bf16 autocast", "#55A868")}


def time_panel(doc, ax):
    """The CPU step times of the cpu_time blocks, as the summary digests their points: each
    mode's median step time (one run per mode, log axis: the models differ 250x), the
    16-bit modes labelled with their ratio to fp32."""
    rows = [r for r in doc["summary"].get("cpu_time", []) if any(is_num((r.get(m) or {}).get("median_step_s"))
                                                                 for m in MODES)]
    if not rows:
        ax.text(0.5, 0.5, "no CPU step times in the results", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    width = 0.26
    for k, m in enumerate(MODES):
        label, colour = MODE_STYLE[m]
        xs, ys = [], []
        for i, r in enumerate(rows):
            v = (r.get(m) or {}).get("median_step_s")
            if is_num(v) and v > 0:
                xs.append(i + (k - 1) * width)
                ys.append(1e3 * v)
        bars = ax.bar(xs, ys, width, label=label, color=colour)
        if m != "off":
            ratios = [(r.get(m) or {}).get("time_ratio") for r in rows
                      if is_num((r.get(m) or {}).get("median_step_s")) and r[m]["median_step_s"] > 0]
            ax.bar_label(bars, [f"{t:.2f}x" if is_num(t) else "" for t in ratios], fontsize=7, padding=2)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r['model']}\n({r['steps']} steps)" if is_num(r.get("steps")) else r["model"]
                        for r in rows], fontsize=8)
    ax.set_ylabel("median step time on the CPU, ms (log scale)")
    ax.set_title("CPU step time per mode (one run each, not judged;\nlabels: time vs fp32)", fontsize=10)
    ax.margins(y=0.15)
    ax.grid(axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")


def plot_05(doc, path):
    fig, (mem, time) = plt.subplots(1, 2, figsize=(13, 4.4), gridspec_kw={"width_ratios": [1.25, 1]})
    memory_panel(doc, mem)
    time_panel(doc, time)
    fig.suptitle(f"{doc['experiment']}: AMP's memory (meta, exact) and its CPU step time", fontsize=11)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
    src, summ = doc["source"], doc["summary"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n"]
    rows = []
    for model, gpus in src["memory_gb"].items():
        for gpu, (a, b) in gpus.items():
            t = src["time_s"][model][gpu]
            rows.append([model, gpu, f"{a} GB", f"{b} GB", f"{b / a:.3f}x", f"{t[0]} s", f"{t[1]} s",
                         f"{t[0] / t[1]:.2f}x"])
    parts.append(md_table(["model", "GPU", "memory fp32", "memory AMP", "ratio", "time fp32", "time AMP",
                           "speed-up"], rows, right={2, 3, 4, 5, 6, 7}))
    parts.append("The source's memory in its own GB (it does not say 10^9 or 2^30 B): only its ratios are "
                 "compared with ours, which are MiB (2^20 B).\n")
    parts.append("\n### Ours: exact training peaks (meta device, one step after the first, Adam)\n")
    parts.append("Activations are the bytes kept after the forward (what backward needs), the 16-bit weight "
                 "copies autocast makes included: tiny-ff's 40x is its weights' copies, not activations.\n")
    rows = []
    for r in summ["memory"]:
        cells = [r["model"]]
        for m in MODES:
            e = r.get(m)
            cells.append(f"{e['peak_mib']:,.0f} MiB ({e['peak_ratio']:.3f}x)" if e else "n/a")
        for m in MODES:
            e = r.get(m)
            cells.append(f"{e['activation_ratio']:.2f}x" if e else "n/a")
        cells.append(" / ".join(f"{r[m]['model_state_bytes_per_param']:.1f}" for m in MODES if r.get(m)))
        s = r.get("source_peak_ratio", {})
        cells.append(", ".join(f"{g} {v:.3f}x" for g, v in s.items()))
        rows.append(cells)
    parts.append(md_table(["model", "peak fp32", "peak fp16", "peak bf16", "activations fp32", "fp16", "bf16",
                           "model state B/param (off/fp16/bf16)", "source ratio"], rows,
                          right=set(range(1, 8))))
    rows = []
    for r in summ["memory"]:
        if not any(r.get(m) for m in HALF_MODES):
            continue
        cells = [r["model"], f"{r['off']['peak_mib']:,.0f} MiB"]
        for m in HALF_MODES:
            e = r.get(m)
            cells.append(f"{e['peak_mib']:,.0f} MiB ({e['peak_ratio']:.3f}x)" if e else "n/a")
        for m in HALF_MODES:
            e = r.get(m)
            cells.append(f"{e['activation_ratio']:.2f}x" if e else "n/a")
        cells.append(" / ".join(f"{r[m]['model_state_bytes_per_param']:.1f}" for m in ("off",) + HALF_MODES
                                if r.get(m)))
        rows.append(cells)
    if rows:
        parts.append("\n`--half` (the source's `model.half()`: weights and activations float16, BatchNorm float32; "
                     "the optimizer on the float16 weights) and `--half --master-weights` (float32 copies the "
                     "optimizer updates, Apex O2), same step and optimizer:\n")
        parts.append(md_table(["model", "peak fp32", "peak --half", "peak + masters", "activations --half",
                               "+ masters", "model state B/param (fp32/half/+masters)"], rows, right=set(range(1, 7))))
    rows = []
    for r in summ["cpu_time"]:
        cells = [r["model"], r["steps"]]
        for m in MODES:
            e = r.get(m)
            cells.append(f"{1e3 * e['median_step_s']:.0f} ms ({e['time_ratio']:.2f}x)" if e else "n/a")
        rows.append(cells)
    if rows:
        parts.append(f"\nCPU median step time per mode ({doc['context'].get('cpu', 'cpu')}; the CPU computes "
                     "16-bit ops in float32 and pays for the casts, so this is AMP's cost on a CPU, not a GPU "
                     "figure):\n")
        parts.append(md_table(["model", "steps", "fp32", "fp16", "bf16"], rows, right={1, 2, 3, 4}))
    rows = []

    def pct(v):
        return f"{100 * v:.2f}%" if is_num(v) else "n/a"
    for r in summ["accuracy"]:
        off, bf = r.get("off", {}), r.get("bf16", {})
        a, b = off.get("final_test_accuracy"), bf.get("final_test_accuracy")
        cells = [r["model"], r["steps"], pct(a), pct(b),
                 f"{100 * (b - a):+.2f} points" if is_num(a) and is_num(b) else "n/a"]
        for m in HALF_MODES:
            e = r.get(m, {})
            skipped = f", {e['skipped_steps']} skipped" if is_num(e.get("skipped_steps")) else ""
            cells.append(pct(e.get("final_test_accuracy")) + skipped if e else "n/a")
        rows.append(cells)
    if rows:
        parts.append("\nAccuracy, fp32 vs autocast bf16 and the --half modes (same seeds, evaluation in the "
                     "run's precision):\n")
        parts.append(md_table(["model", "steps", "fp32", "bf16", "bf16 - fp32", "--half", "--half --master-weights"],
                              rows, right={1, 2, 3, 4, 5, 6}))
    fig = "figures/05_amp.png"
    plot_05(doc, out_dir / fig)
    parts.append(f"![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


FIGURES = ["figures/05_amp.png"]
