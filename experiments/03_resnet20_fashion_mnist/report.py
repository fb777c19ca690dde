"""report.py — the report section of experiment 03_resnet20_fashion_mnist: the source's anchors
and our target accuracy, our train and test loss and accuracy per epoch, and one figure
(accuracy per epoch against the target).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.results import is_num
from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table


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


def render(doc, out_dir):
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


FIGURES = ["figures/03_resnet20_fashion_mnist.png"]
