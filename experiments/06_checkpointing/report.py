"""report.py — the report section of experiment 06_checkpointing: the source's
BERT checkpointing table beside our exact meta peaks per policy and batch, the largest batch
that fits the capacity, time and accuracy, and one figure (peak against batch per policy).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.results import is_num
from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table


def plot_06(doc, path):
    src, summ = doc["source"], doc["summary"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.3))
    series = {}
    for p in doc["points"]:
        if p.get("command") != "estimate" or p.get("options", {}).get("model") != "bert-base":
            continue
        if p.get("outcome", {}).get("status") != "ok":
            continue
        series.setdefault(p["axes"]["checkpoint"], []).append(
            (p["axes"]["batch"], p["metrics"]["exact"]["peak_allocated_bytes"] / 2**20))
    for pol, pts in series.items():
        pts.sort()
        ax.plot([b for b, _ in pts], [m for _, m in pts], "o-", label=f"ours: {pol}")
    ax.axhline(src["capacity_gib"] * 1024, color="grey", ls=":", label=f"{src['capacity_gib']} GiB card")
    mb = 1e6 / 2**20   # the source's MB (10^6 bytes) in MiB
    ax.plot([src["batch_without"]], [src["memory_mb_without"] * mb], "kx", ms=9, label="source: no checkpoint")
    ax.plot([src["batch_without"], src["batch_with"]],
            [src["memory_mb_with"] * mb, 10212 * mb], "k+", ms=10, label="source: checkpoint")
    ax.set_xlabel("batch")
    ax.set_ylabel("training peak (MiB)")
    ax.set_title("bert-base, seq 384, AdamW, fp32 (meta, exact)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    rows = [r for r in summ["bert_mini"] if is_num(r.get("activation_reduction_x"))]
    for r in rows:
        bx.plot(100 * r["time_overhead"], r["activation_reduction_x"], "o")
        bx.annotate(r["policy"], (100 * r["time_overhead"], r["activation_reduction_x"]), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")
    bx.axhline(src["target_activation_reduction"], color="#C44E52", ls=":", lw=0.8)
    bx.axvline(100 * src["target_time_overhead"], color="#C44E52", ls=":", lw=0.8,
               label="bar: >= 3x less for <= +30% time")
    bx.set_xlabel("time per step vs none (%)")
    bx.set_ylabel("activation memory reduction (x)")
    bx.set_title("bert-mini, batch 32, seq 128 (CPU time, meta bytes)", fontsize=9)
    bx.grid(alpha=0.3)
    bx.legend(fontsize=7)
    fig.suptitle(f"{doc['experiment']}: memory and time per checkpoint policy", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
    src, summ = doc["source"], doc["summary"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n"]
    parts.append(md_table(["", "no checkpoint", "checkpoint (attention + GELU)"],
                          [[f"memory at batch {src['batch_without']}, MB (10^6 B)", f"{src['memory_mb_without']:,}",
                            f"{src['memory_mb_with']:,}"],
                           [f"largest batch ({src['capacity_gib']} GiB card)", src["batch_without"], src["batch_with"]],
                           ["time overhead", "", f"+{100 * src['time_overhead']:.0f}%"]]))
    parts.append("\n### Ours\n")
    parts.append("Our bytes are MiB (2^20 B); the source's MB are read as 10^6 B (the figure converts them).\n")
    rows = []
    for r in summ["bert_base"]:
        at = r.get("peak_mib_at_source_batch")
        red = r.get("reduction_at_source_batch")
        rows.append([r["policy"], f"{at:,.0f} MiB" if is_num(at) else "n/a",
                     f"{-100 * red:.0f}%" if is_num(red) else "n/a", f"{r['per_sample_mib']:.1f} MiB",
                     f"{r['max_batch_in_capacity']:.0f}"])
    parts.append(f"bert-base, seq 384, AdamW, fp32, exact meta-device peaks; largest batch under "
                 f"{src['capacity_gib']} GiB from a linear fit over the measured batches.\n")
    parts.append(md_table(["policy", f"peak at batch {summ['source_batch']}", "vs none", "per sample",
                           "largest batch"], rows, right={1, 2, 3, 4}))
    rows = []
    for r in sorted(summ["bert_mini"], key=lambda r: r.get("activation_reduction_x", 0)):
        rows.append([r["policy"], f"{r['activation_mib']:.0f} MiB" if is_num(r.get("activation_mib")) else "n/a",
                     f"{r['activation_reduction_x']:.2f}x" if is_num(r.get("activation_reduction_x")) else "n/a",
                     f"{1e3 * r['median_step_s']:.0f} ms", f"{100 * r['time_overhead']:+.0f}%",
                     f"{100 * r['final_test_accuracy']:.1f}%", "yes" if r["loss_history_identical"] else "NO"])
    parts.append(f"\nbert-mini, batch 32, seq 128: activations kept after forward (meta, exact) and "
                 f"median CPU step time over {summ['steps']} steps ({doc['context'].get('cpu', 'cpu')}, "
                 f"shared machine: a few percent is noise).\n")
    parts.append(md_table(["policy", "activations", "reduction", "median step", "time vs none",
                           "test accuracy", "loss history = none"], rows, right={1, 2, 3, 4, 5}))
    chen = summ.get("chen_depth") or []
    if chen:
        layers = [q["layers"] for q in chen[0]["points"]]
        rows = [[c["policy"]] + [f"{q['activation_mib']:,.0f} MiB" for q in c["points"]] +
                [f"{c['depth_exponent']:.2f}"] for c in chen]
        parts.append("\nChen et al. 2016, memory vs depth: bert-mini (seq 128, batch 8) with more encoder "
                     "layers, activations kept after forward (meta, exact) and the exponent of a log-log fit "
                     "(1 = linear in depth, 0.5 = sqrt).\n")
        parts.append(md_table(["policy"] + [f"{int(n)} layers" for n in layers] + ["exponent"], rows,
                              right=set(range(1, len(layers) + 2))))
    fig = "figures/06_checkpointing.png"
    plot_06(doc, out_dir / fig)
    parts.append(f"![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


FIGURES = ["figures/06_checkpointing.png"]
