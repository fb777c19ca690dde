"""report.py — the report section of experiment 07_accumulation_bn: the
source's MMCV tables, our per-setting accuracies (mean and spread over seeds) with the
loss-history differences against 32x1, and one figure (test accuracy against micro-batch
size at effective batch 32, BatchNorm vs GroupNorm, with the source's ResNet-34 points).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.results import is_num
from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table


def plot_07(doc, path):
    rows = doc["summary"]["rows"]
    fig, ax = plt.subplots(figsize=(7, 4))
    for norm, style in (("bn", "o-"), ("gn", "s--")):
        # effective batch 32: 32x1 and the accumulated settings (16x1 is another batch)
        pts = sorted(((r["micro_batch"], r) for r in rows
                      if r["model"] == "resnet20" and r["norm"] == norm
                      and (r["setting"] == "32x1" or not r["setting"].endswith("x1"))), key=lambda p: p[0])
        if not pts:
            continue
        xs = [m for m, _ in pts]
        ys = [100 * r["accuracy_mean"] for _, r in pts]
        es = [100 * r["accuracy_std"] for _, r in pts]
        ax.errorbar(xs, ys, yerr=es, fmt=style, capsize=3, label=f"ResNet-20 {norm.upper()} (ours)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("micro-batch size (accumulated to 32)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{doc['experiment']}: accuracy vs micro-batch, BatchNorm vs GroupNorm", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
    src, summ = doc["source"], doc["summary"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n"]
    parts.append(md_table(["ResNet-34 with BN (samples x iters)", "accuracy"],
                          [[k, v] for k, v in src["resnet34_bn_accuracy"].items()], right={1}))
    parts.append("")
    parts.append(md_table(["Faster R-CNN without BN (samples x iters)", "bbox mAP"],
                          [[k, v] for k, v in src["faster_rcnn_no_bn_map"].items()], right={1}))
    parts.append("\n### Ours (Fashion-MNIST, CPU; micro-batch x accumulation steps)\n")
    rows = []
    for r in summ["rows"]:
        d = r.get("loss_history_max_rel_diff_vs_32x1")
        f = r.get("first_loss_rel_diff_vs_32x1")
        rows.append([r["model"], r["norm"], r["setting"], r["steps"], r["seeds"],
                     f"{100 * r['accuracy_mean']:.2f}% ± {100 * r['accuracy_std']:.2f}" if is_num(r["accuracy_mean"]) else "n/a",
                     f"{f:.1e}" if is_num(f) else "", f"{d:.1e}" if is_num(d) else (d or "")])
    parts.append(md_table(["model", "norm", "setting", "steps", "seeds", "test accuracy (mean ± std)",
                           "first loss vs 32x1 (rel.)", "loss history vs 32x1 (max rel.)"], rows,
                          right={3, 4, 5, 6, 7}))
    fig = "figures/07_accumulation_bn.png"
    plot_07(doc, out_dir / fig)
    parts.append(f"\n![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


FIGURES = ["figures/07_accumulation_bn.png"]
