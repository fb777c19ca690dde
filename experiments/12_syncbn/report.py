"""report.py — the report section of experiment 12_syncbn (T8): the source's claim and
Wu & He's published per-GPU batch table, our accuracy (mean and spread over seeds) and step
time per per-device batch for per-device BatchNorm, SyncBatchNorm and GroupNorm with the
SyncBN - BN gap against the seed spread, and one figure: (left) our test accuracy against the
per-device batch per normalisation, (middle) Wu & He's ImageNet accuracy (100 - error) for
per-GPU BN and GN, (right) SyncBN's step time over BN's per per-device batch as the verdict
judges it: the summary's paired ratio over the seeds' alternating runs with its 95% interval
(syncbn_time_ratio_interval; GroupNorm's likewise, not judged). The table shows that same paired
ratio; per-normalisation step times appear only as the medians over the seeds, labelled so
(their ratio is not the verdict's estimator).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from oomlab_report.results import is_num
from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table, ratio_interval_text

NORMS = (("bn", "per-device BN", "o-"), ("syncbn", "SyncBN", "s-"), ("gn", "GroupNorm", "^--"))


def _rows(doc, norm):
    return sorted((r for r in doc["summary"]["rows"] if r["norm"] == norm), key=lambda r: r["per_device_batch"])


def time_ratio_panel(doc, ax):
    """Per-device BN's step time as the denominator: SyncBN's (the verdict's claim) and GN's
    paired ratio with its 95% interval, per per-device batch."""
    gaps = sorted(doc["summary"]["gaps"], key=lambda g: g["per_device_batch"])
    for key, label, style, shift in (("syncbn_time_ratio_interval", "SyncBN ÷ BN (judged)", "s-", 1.0),
                                     ("gn_time_ratio_interval", "GN ÷ BN (not judged)", "^--", 1.06)):
        pts = [(g["per_device_batch"] * shift, g[key]) for g in gaps
               if isinstance(g.get(key), dict) and is_num(g[key].get("estimate"))]
        if not pts:
            continue
        xs, est = [x for x, _ in pts], [ci["estimate"] for _, ci in pts]
        lo = [e - ci["lo"] if is_num(ci.get("lo")) else 0 for e, (_, ci) in zip(est, pts)]
        hi = [ci["hi"] - e if is_num(ci.get("hi")) else 0 for e, (_, ci) in zip(est, pts)]
        ax.errorbar(xs, est, yerr=[lo, hi], fmt=style, capsize=3, label=label,
                    color="C1" if key.startswith("syncbn") else "C2")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_yscale("log")
    lo, hi = ax.get_ylim()
    ax.yaxis.set_major_locator(FixedLocator([t for t in (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4) if lo <= t <= hi]))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_title("ours: step time over per-device BN's\n(paired ratio over seeds, 95% CI)", fontsize=10)
    ax.set_ylabel("time ratio (log scale; 4 ranks on 2 cores)")


def plot_12(doc, path):
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 4))
    for norm, label, style in NORMS:
        rows = [r for r in _rows(doc, norm) if is_num(r["accuracy_mean"])]
        if not rows:
            continue
        xs = [r["per_device_batch"] for r in rows]
        a.errorbar(xs, [100 * r["accuracy_mean"] for r in rows], yerr=[100 * r["accuracy_std"] for r in rows],
                   fmt=style, capsize=3, label=label)
    a.set_title("ours: ResNet-20, Fashion-MNIST, 4 DDP ranks", fontsize=10)
    a.set_ylabel("test accuracy (%)")
    wh = doc["source"].get("wu_he_2018")
    if wh:
        b.plot(wh["per_gpu_batch"], [100 - e for e in wh["bn_error"]], "o-", label="per-GPU BN")
        b.plot(wh["per_gpu_batch"], [100 - e for e in wh["gn_error"]], "^--", color="C2", label="GroupNorm")
    b.set_title("Wu & He 2018: ResNet-50, ImageNet, 8 GPUs", fontsize=10)
    b.set_ylabel("top-1 accuracy (%)")
    time_ratio_panel(doc, c)
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
        ci = g.get("syncbn_time_ratio_interval") or {}
        rows.append([b, any_r["global_batch"], f"{any_r['lr']:g}", any_r["steps"], any_r["seeds"],
                     _pct(by.get((b, "bn"))), _pct(by.get((b, "syncbn"))), _pct(by.get((b, "gn"))),
                     f"{gap:+.2f} ({spread:.2f})" if is_num(gap) and is_num(spread) else "n/a",
                     f"{g['gn_minus_bn_points']:+.2f}" if is_num(g.get("gn_minus_bn_points")) else "n/a",
                     ratio_interval_text(ci, "×"),
                     " / ".join(f"{1e3 * by[(b, n)]['step_time_s']:.0f}" if (b, n) in by else "—"
                                for n in ("bn", "syncbn", "gn"))])
    parts.append(md_table(["per-device batch", "global batch", "lr", "steps", "seeds", "BN accuracy",
                           "SyncBN accuracy", "GN accuracy", "SyncBN − BN, points (spread)", "GN − BN, points",
                           "SyncBN ÷ BN time (paired ratio, 95% CI)",
                           "median step ms over seeds, BN / SyncBN / GN"], rows))
    parts.append("Accuracy: mean ± sample std over seeds on the first "
                 f"{summ['rows'][0]['test_samples'] if summ['rows'] else 0} test images (eval mode: running "
                 "statistics, rank 0's under per-device BN). Spread: the two stds added. Every per-device batch "
                 "sees the same samples; learning rate per sample of the global batch: "
                 + ", ".join(sorted({f"{r['lr'] / r['global_batch']:.3g}" for r in summ["rows"]})) + ". "
                 "Time: **SyncBN ÷ BN** is the verdict's estimator, the paired ratio (the geometric mean over "
                 "the seeds of SyncBN's median step over BN's, the two run back to back within each seed) with its "
                 "95% interval. "
                 "The median step times are descriptive only (each normalisation's median over the seeds); "
                 "their ratio is not the estimator and can differ from it.\n")
    fig = "figures/12_syncbn.png"
    plot_12(doc, out_dir / fig)
    parts.append(f"\n![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


FIGURES = ["figures/12_syncbn.png"]
