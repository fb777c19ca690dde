"""report.py — the report section of experiment 13_lr_scaling (T10): the source's
linear-scaling advice and Goyal et al.'s published ImageNet figure, one row per setting
(devices, global batch, learning rate and its factor, warm-up, steps, accuracy mean and spread
over seeds, difference from the 1-device runs against the tolerance, diverged runs), and one
figure: test accuracy against the global batch for no scaling, lr x k with warm-up, lr x k
without warm-up and 8 devices at 4x, with the 1-device accuracy as a band.

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.results import is_num
from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table


def _series(rows):
    """(label, style, rows) per learning-rate rule; k = devices."""
    def pick(cond):
        return sorted((r for r in rows if r["devices"] > 1 and cond(r)), key=lambda r: r["devices"])
    def times(r, f):
        return abs(r["lr_factor"] - f * r["devices"]) < 1e-6
    return [("lr × 1 (no scaling)", "o-", pick(lambda r: abs(r["lr_factor"] - 1) < 1e-6)),
            ("lr × k, warm-up", "s-", pick(lambda r: times(r, 1) and r["warmup"])),
            ("lr × k, no warm-up", "^--", pick(lambda r: times(r, 1) and not r["warmup"])),
            ("lr × k/2, warm-up (8 × batch, 4 × lr)", "D", pick(lambda r: times(r, 0.5) and r["warmup"]))]


def plot_13(doc, path):
    rows = doc["summary"]["rows"]
    fig, ax = plt.subplots(figsize=(7, 4))
    ref = next((r for r in rows if r["devices"] == 1), None)
    if ref and is_num(ref["accuracy_mean"]):
        m, s = 100 * ref["accuracy_mean"], 100 * ref["accuracy_std"]
        ax.axhspan(m - s, m + s, color="0.85", label=f"1 device (batch {ref['global_batch']}) ± std")
        ax.axhline(m, color="0.4", lw=1)
    for label, style, rs in _series(rows):
        rs = [r for r in rs if is_num(r["accuracy_mean"])]
        if rs:
            ax.errorbar([r["global_batch"] for r in rs], [100 * r["accuracy_mean"] for r in rs],
                        yerr=[100 * r["accuracy_std"] for r in rs], fmt=style, capsize=3, label=label)
    ax.set_xscale("log", base=2)
    ticks = sorted({r["global_batch"] for r in rows})
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("global batch (32 per device × k devices)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"{doc['experiment']}: MLP, Fashion-MNIST, the same epochs at every k", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def _pct(r):
    return f"{100 * r['accuracy_mean']:.2f}% ± {100 * r['accuracy_std']:.2f}" if is_num(r["accuracy_mean"]) else "n/a"


def render(doc, out_dir):
    src, summ = doc["source"], doc["summary"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n"]
    g = src.get("goyal_2017")
    if g:
        parts.append(md_table(["Goyal et al. 2017 (ResNet-50, ImageNet)", "minibatch", "top-1 error (%)", "accuracy (%)"],
                              [["baseline", g["batch_small"], g["top1_error_small"], f"{100 - g['top1_error_small']:.2f}"],
                               [f"lr × {g['batch_large'] // g['batch_small']}, {g['warmup_epochs']}-epoch warm-up",
                                g["batch_large"], g["top1_error_large"], f"{100 - g['top1_error_large']:.2f}"]]))
    parts.append("\n### Ours (MLP, Fashion-MNIST, DDP over k rank threads, 32 samples per device)\n")
    rows = []
    for r in summ["rows"]:
        d, tol = r.get("minus_1_device_points"), r.get("tolerance_points")
        rows.append([r["setting"], r["devices"], r["global_batch"], f"{r['lr']:g} (× {r['lr_factor']:g})",
                     "yes" if r["warmup"] else "no", r["steps"], r["seeds"],
                     _pct(r),
                     f"{d:+.2f} (± {tol:.2f})" if is_num(d) and is_num(tol) else "—", r["diverged"] or ""])
    parts.append(md_table(["setting", "devices", "global batch", "lr (factor)", "warm-up", "steps", "seeds",
                           "test accuracy (mean ± std)", "− 1 device, points (tolerance)", "diverged"], rows,
                          right={1, 2, 3, 5, 6, 7, 8, 9}))
    parts.append("Warm-up: `warmup-cosine` (linear from 0 over the first 10% of the steps, then cosine to 0); "
                 "no warm-up: `cosine`. Tolerance: the larger of the source's "
                 f"{src.get('match_tolerance_points')} points and the two seed stds added. Test accuracy on the whole "
                 "test set (10,000 images).\n")
    fig = "figures/13_lr_scaling.png"
    plot_13(doc, out_dir / fig)
    parts.append(f"\n![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


FIGURES = ["figures/13_lr_scaling.png"]
