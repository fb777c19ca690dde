"""report.py — the report section of experiment 14_recipe (T10's recipe elements): the
source's list, one table per element (the per-group learning rates against the source's
LambdaLR lambda; EMA and test-time augmentation per seed; distributed evaluation against one
device, with what keeping the sampler's padding would report; checkpoint resumes on 4, 2 and
1 device(s) against the uninterrupted run) and one figure (each group's lr per step beside
the lambda's values).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import math

import matplotlib.pyplot as plt

from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table

FIG = "figures/14_recipe.png"


def source_lambda(L, t):
    w, T, M, m = L["warm_up_iter"], L["t_max"], L["lr_max"], L["lr_min"]
    if t < w:
        return t / w
    return (m + 0.5 * (M - m) * (1 + math.cos((t - w) / (T - w) * math.pi))) / M


def plot_14(doc, path):
    L = doc["source"]["lambda_lr"]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for g in doc["summary"]["lambda_lr"]["groups"]:
        steps = range(1, len(g["lrs"]) + 1)
        ax.plot(steps, g["lrs"], "o", ms=3, label=f"measured, group at base lr {g['base_lr']:g}")
        ax.plot(steps, [g["base_lr"] * source_lambda(L, t) for t in steps], "-", lw=0.8,
                label=f"base lr x the source's lambda ({g['base_lr']:g})")
    ax.set_xlabel("scheduler steps")
    ax.set_ylabel("learning rate")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(f"{doc['experiment']}: per-group lr under LambdaLR (warm-up 10, T_max 50)", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def pct(v):
    return f"{100 * v:.2f}%" if isinstance(v, (int, float)) else "n/a"


def render(doc, out_dir):
    s = doc["summary"]
    parts = ["### Source\n", f"{doc['source'].get('citation', '')}\n", "\n### Ours\n"]
    lam = s["lambda_lr"]
    parts.append(md_table(["group base lr", "steps", "largest relative miss vs base x lambda",
                           "largest |lr - warmup-cosine's|"],
                          [[f"{g['base_lr']:g}", lam["steps"], f"{g['max_rel_miss']:.2e}",
                            f"{g['warmup_cosine_max_abs_diff']:.2e}"] for g in lam["groups"]], right={1, 2, 3}))
    et = s["ema_tta"]
    parts.append("\n**EMA and test-time augmentation** (final test accuracy; the same training per seed):\n")
    parts.append(md_table(["seed", "raw weights", "EMA", "EMA + flip TTA", "raw + flip TTA"],
                          [[r["seed"], pct(r["raw"]), pct(r["ema"]), pct(r["tta_flip"]), pct(r["tta_flip_raw"])]
                           for r in et["rows"]], right={0, 1, 2, 3, 4}))
    parts.append("\n**Distributed evaluation:**\n")
    parts.append(md_table(["run", "test samples scored", "accuracy", "padding samples", "accuracy if the padding is kept"],
                          [[k, v["test_samples"], pct(v["test_accuracy"]), v.get("test_padding_samples", 0),
                            pct(v.get("test_accuracy_padding_kept"))] for k, v in sorted(s["dist_eval"].items())],
                          right={1, 2, 3, 4}))
    parts.append("\n**Checkpoints** (final test loss against the uninterrupted 4-rank run):\n")
    parts.append(md_table(["run", "final test loss", "relative difference"],
                          [[k, f"{v['test_loss']:.10f}", f"{v['test_loss_rel_diff']:.2e}"]
                           for k, v in s["checkpoint"].items()], right={1, 2}))
    plot_14(doc, out_dir / FIG)
    parts.append(f"\n![{doc['experiment']}]({FIG})\n")
    return "\n".join(parts), [FIG]


FIGURES = [FIG]
