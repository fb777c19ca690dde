"""report.py — the report section of experiment 16_your_model_memory: the source's formula
against the exact peak for eight imported models, the activations' share, what each technique
saves, the largest batch per card (one table), and one figure (the largest batch on a 24 GiB
card per model and technique).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table

FIG = "figures/16_your_model_memory.png"
TECHS = ["fp32", "amp-fp16", "checkpoint-sqrt", "fused-attention"]


def gib(b):
    return f"{b / 2**30:.2f}"


def batches(t):
    lb = t.get("largest_batch", {})
    return " / ".join(str(lb[c]) for c in sorted(lb)) if lb else "n/a"


def plot_16(doc, path):
    rows = doc["summary"]["models"]
    fig, ax = plt.subplots(figsize=(10, 3.8))
    width = 0.2
    for k, tech in enumerate(TECHS):
        xs, ys = [], []
        for i, r in enumerate(rows):
            t = r["techniques"].get(tech)
            if t and "24GiB" in t.get("largest_batch", {}):
                xs.append(i + (k - 1.5) * width)
                ys.append(max(t["largest_batch"]["24GiB"], 0.5))
        ax.bar(xs, ys, width, label=tech)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["model"] for r in rows], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("largest batch on a 24 GiB card")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.suptitle(f"{doc['experiment']}: AdamW training step, exact meta-device peaks", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
    s = doc["summary"]
    parts = ["### Source\n", f"{doc['source'].get('citation', '')}\n",
             f"\n### Ours (exact meta peaks, batch {s['batch']}; largest batch per card: "
             + " / ".join(sorted(doc["source"]["cards_bytes"])) + ")\n"]
    table = []
    for r in s["models"]:
        t = r["techniques"]
        saving = [f"{100 * t[x]['saving']:.0f}%" if x in t else "-" for x in TECHS[1:]]
        table.append([r["model"], f"{r['params'] / 1e6:.1f}M", gib(r["peak_bytes"]), gib(r["formula_bytes"]),
                      f"{100 * r['formula_error']:+.0f}%", f"{100 * r['activation_share']:.0f}%"] + saving
                     + [batches(t[x]) if x in t else "-" for x in TECHS])
    parts.append(md_table(
        ["model", "params", "peak GiB", "formula GiB", "formula error", "activations", "AMP saves",
         "ckpt saves", "fused saves", "batch fp32", "batch AMP", "batch ckpt", "batch fused"],
        table, right=set(range(1, 13))))
    plot_16(doc, out_dir / FIG)
    parts.append(f"\n![{doc['experiment']}]({FIG})\n")
    return "\n".join(parts), [FIG]


FIGURES = [FIG]
