"""report.py — the report section of experiment 17_cuda_graphs: per model, eager against
graphed training on the meta device (allocations per step, allocated and reserved peaks, the
graph's private pool, the largest batch on the card eager and graphed) in one table, and
one figure (the peaks and the pool per model). The GPU
side: the newest GPU kit record holding the graphed rows (oomlab_report/gpu_points.py).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table
from oomlab_report.gpu_points import gpu_table

FIG = "figures/17_cuda_graphs.png"


def gib(b):
    return f"{b / 2**30:.3f}"


def plot_17(doc, path):
    rows = doc["summary"]["models"]
    fig, ax = plt.subplots(figsize=(9, 3.6))
    width = 0.2
    bars = [("eager", "peak_bytes", "allocated peak, eager"), ("graphs", "peak_bytes", "allocated peak, graphs"),
            ("eager", "reserved_bytes", "reserved peak, eager"), ("graphs", "reserved_bytes", "reserved peak, graphs")]
    for k, (mode, key, label) in enumerate(bars):
        xs = [i + (k - 1.5) * width for i in range(len(rows))]
        ax.bar(xs, [r[mode][key] / 2**30 for r in rows], width, label=label)
    ax.scatter(range(len(rows)), [r["graphs"]["pool_bytes"] / 2**30 for r in rows], marker="_", s=400, c="k",
               zorder=3, label="graph's private pool")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["model"] for r in rows])
    ax.set_ylabel("GiB (exact, meta device)")
    ax.grid(alpha=0.3, axis="y")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.35)
    ax.legend(fontsize=7, loc="upper left", ncol=3)
    fig.suptitle(f"{doc['experiment']}: one training step eager and captured", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
    s = doc["summary"]
    parts = ["### Source\n", f"{doc['source'].get('citation', '')}\n",
             "\n### Ours (exact, meta device; 3 warm-up steps, the 4th captured, then replays)\n"]
    table = []
    for r in s["models"]:
        e, g = r["eager"], r["graphs"]
        table.append([r["model"], f"{e['allocations_per_step']:g}", f"{g['allocations_per_step']:g}",
                      gib(e["peak_bytes"]), gib(g["peak_bytes"]), gib(e["reserved_bytes"]), gib(g["reserved_bytes"]),
                      gib(g["pool_bytes"]), str(e.get("largest_batch", "-")), str(g.get("largest_batch", "-"))])
    card = s.get("card", "")
    parts.append(md_table(["model", "allocs / eager step", "allocs / replay", "peak GiB eager", "peak GiB graphs",
                           "reserved GiB eager", "reserved GiB graphs", "graph pool GiB",
                           f"largest batch {card} eager", f"largest batch {card} graphs"], table,
                          right=set(range(1, 10))))
    gpu = gpu_table([("ResNet-50 b128 AMP bf16", "r50_bf16", "r50_bf16_cudagraphs"),
                     ("BERT-base b32 s128 AMP bf16", "bert_bf16", "bert_bf16_cudagraphs")],
                    base="eager", other="graphed", peaks=True)
    if gpu:
        parts += ["\n### On a GPU (the GPU kit; PyTorch's graphed step: torch.cuda.graph, where it ran one)\n", gpu]
    plot_17(doc, out_dir / FIG)
    parts.append(f"\n![{doc['experiment']}]({FIG})\n")
    return "\n".join(parts), [FIG]


FIGURES = [FIG]
