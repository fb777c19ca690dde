"""report.py — the report section of experiment 12_syncbn (T8): the source's claim and
Wu & He's published per-GPU batch table, our accuracy (mean and spread over seeds) and step
time per per-device batch for per-device BatchNorm, SyncBatchNorm and GroupNorm with the
SyncBN - BN gap against the seed spread, and one figure: (left) our test accuracy against the
per-device batch per normalisation, (middle) Wu & He's ImageNet accuracy (100 - error) for
per-GPU BN and GN, (right) our median step time per normalisation.

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from oomlab_report.results import is_num  # noqa: E402
from oomlab_report.atomic import save_fig_atomic  # noqa: E402
from oomlab_report.fmt import md_table  # noqa: E402

NORMS = (("bn", "per-device BN", "o-"), ("syncbn", "SyncBN", "s-"), ("gn", "GroupNorm", "^--"))


def _rows(doc, norm):
    return sorted((r for r in doc["summary"]["rows"] if r["norm"] == norm), key=lambda r: r["per_device_batch"])


def plot_12(doc, path):
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 4))
    for norm, label, style in NORMS:
        rows = [r for r in _rows(doc, norm) if is_num(r["accuracy_mean"])]
        if not rows:
            continue
        xs = [r["per_device_batch"] for r in rows]
        a.errorbar(xs, [100 * r["accuracy_mean"] for r in rows], yerr=[100 * r["accuracy_std"] for r in rows],
                   fmt=style, capsize=3, label=label)
        c.plot(xs, [1e3 * r["step_time_s"] for r in rows], style, label=label)
    a.set_title("ours: ResNet-20, Fashion-MNIST, 4 DDP ranks", fontsize=10)
    a.set_ylabel("test accuracy (%)")
    wh = doc["source"].get("wu_he_2018")
    if wh:
        b.plot(wh["per_gpu_batch"], [100 - e for e in wh["bn_error"]], "o-", label="per-GPU BN")
        b.plot(wh["per_gpu_batch"], [100 - e for e in wh["gn_error"]], "^--", color="C2", label="GroupNorm")
    b.set_title("Wu & He 2018: ResNet-50, ImageNet, 8 GPUs", fontsize=10)
    b.set_ylabel("top-1 accuracy (%)")
    c.set_title("ours: median step time", fontsize=10)
    c.set_ylabel("ms per step (4 ranks on 2 cores)")
    c.set_yscale("log")
    ticks = sorted({r["per_device_batch"] for r in doc["summary"]["rows"]} | set((wh or {}).get("per_gpu_batch", [])))
    for ax in (a, b, c):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("per-device batch")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{doc['experiment']}: per-device BN vs SyncBN vs GroupNorm", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def _pct(r):
    return f"{100 * r['accuracy_mean']:.2f}% ± {100 * r['accuracy_std']:.2f}" if r and is_num(r["accuracy_mean"]) else "n/a"


def render(doc, out_dir):
    src, summ = doc["source"], doc["summary"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n"]
    wh = src.get("wu_he_2018")
    if wh:
        parts.append(md_table(["per-GPU batch (Wu & He 2018)", "per-GPU BN error (%)", "GN error (%)"],
                              [[n, e, g] for n, e, g in zip(wh["per_gpu_batch"], wh["bn_error"], wh["gn_error"])]))
    parts.append("\n### Ours (ResNet-20, Fashion-MNIST, DDP over 4 rank threads on the CPU)\n")
    by = {(r["per_device_batch"], r["norm"]): r for r in summ["rows"]}
    gaps = {g["per_device_batch"]: g for g in summ["gaps"]}
    rows = []
    for b in sorted({r["per_device_batch"] for r in summ["rows"]}):
        any_r = next(r for (bb, _), r in by.items() if bb == b)
        g = gaps.get(b, {})
        gap, spread = g.get("syncbn_minus_bn_points"), g.get("syncbn_spread_points")
        ratio = g.get("syncbn_time_ratio")
        rows.append([b, any_r["global_batch"], f"{any_r['lr']:g}", any_r["steps"], any_r["seeds"],
                     _pct(by.get((b, "bn"))), _pct(by.get((b, "syncbn"))), _pct(by.get((b, "gn"))),
                     f"{gap:+.2f} ({spread:.2f})" if is_num(gap) and is_num(spread) else "n/a",
                     f"{g['gn_minus_bn_points']:+.2f}" if is_num(g.get("gn_minus_bn_points")) else "n/a",
                     " / ".join(f"{1e3 * by[(b, n)]['step_time_s']:.0f}" if (b, n) in by else "—"
                                for n in ("bn", "syncbn", "gn")),
                     f"{ratio:.2f}×" if is_num(ratio) else "n/a"])
    parts.append(md_table(["per-device batch", "global batch", "lr", "steps", "seeds", "BN accuracy",
                           "SyncBN accuracy", "GN accuracy", "SyncBN − BN, points (spread)", "GN − BN, points",
                           "step ms BN / SyncBN / GN", "SyncBN ÷ BN time"], rows))
    parts.append("Accuracy: mean ± sample std over seeds on the first "
                 f"{summ['rows'][0]['test_samples'] if summ['rows'] else 0} test images (eval mode: running "
                 "statistics, rank 0's under per-device BN). Spread: the two stds added. Every per-device batch "
                 "sees the same samples; learning rate per sample of the global batch: "
                 + ", ".join(sorted({f"{r['lr'] / r['global_batch']:.3g}" for r in summ["rows"]})) + ".\n")
    fig = "figures/12_syncbn.png"
    plot_12(doc, out_dir / fig)
    parts.append(f"\n![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


FIGURES = ["figures/12_syncbn.png"]
