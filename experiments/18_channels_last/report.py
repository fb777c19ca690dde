"""report.py — the report section of experiment 18_channels_last: per model, the NCHW and
channels_last training runs on the meta device (allocated and reserved peaks, the largest
batch on the card) in one table, and one figure (the allocated peaks per model and layout). The claim's GPU
side: the newest GPU kit record's channels_last rows (oomlab_report/gpu_points.py), beside NCHW.

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table
from oomlab_report.gpu_points import gpu_table

FIG = "figures/18_channels_last.png"


def gib(b):
    return f"{b / 2**30:.3f}"


def plot_18(doc, path):
    rows = doc["summary"]["models"]
    fig, ax = plt.subplots(figsize=(8, 3.4))
    width = 0.35
    for k, (mode, label) in enumerate([("nchw", "NCHW"), ("channels_last", "channels_last")]):
        xs = [i + (k - 0.5) * width for i in range(len(rows))]
        ax.bar(xs, [r[mode]["peak_bytes"] / 2**30 for r in rows], width, label=f"allocated peak, {label}")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["model"] for r in rows])
    ax.set_ylabel("GiB (exact, meta device)")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"{doc['experiment']}: one training step in each layout", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
    s = doc["summary"]
    parts = ["### Source\n", f"{doc['source'].get('citation', '')}\n",
             "\n### Ours (exact, meta device; the batch laid out on the device before each step)\n"]
    card = s.get("card", "")
    table = []
    for r in s["models"]:
        n, c = r["nchw"], r["channels_last"]
        diff_kib = (c["peak_bytes"] - n["peak_bytes"]) / 1024
        table.append([r["model"], gib(n["peak_bytes"]), gib(c["peak_bytes"]), f"{diff_kib:+,.0f}",
                      gib(n["reserved_bytes"]), gib(c["reserved_bytes"]), str(n.get("largest_batch", "-")),
                      str(c.get("largest_batch", "-"))])
    parts.append(md_table(["model", "peak GiB NCHW", "peak GiB channels_last", "difference KiB",
                           "reserved GiB NCHW", "reserved GiB channels_last", f"largest batch {card} NCHW",
                           f"largest batch {card} channels_last"], table, right=set(range(1, 8))))
    gpu = gpu_table([("ResNet-50 b128 TF32", "r50_tf32", "r50_tf32_cl"),
                     ("ResNet-50 b128 AMP bf16", "r50_bf16", "r50_bf16_cl")], base="NCHW", other="channels_last")
    if gpu:
        parts += ["\n### On a GPU (the GPU kit; each side's channels_last beside its NCHW)\n", gpu]
    plot_18(doc, out_dir / FIG)
    parts.append(f"\n![{doc['experiment']}]({FIG})\n")
    return "\n".join(parts), [FIG]


FIGURES = [FIG]
