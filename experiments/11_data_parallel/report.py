"""report.py — the report section of experiment 11_data_parallel (T6): per-device
peak memory under DataParallel, balanced DataParallel and DDP on meta:0..3 for VGG16, ResNet-50
and bert-base; DP's device-0 excess against the model (optimizer state + the input batch less
device 0's chunk); the largest global batch on 11 GiB cards per mode; throughput of DP / BDP /
DDP on two cpu logical devices; the trained model's equality without BatchNorm.
One figure: (left) per-device peak per mode at global batch 64 for each model; (right) the
largest global batch per mode on 11 GiB cards.

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import fmt_bytes, md_table


def plot_11(doc, path):
    models = doc["summary"]["models"]
    names = sorted(models)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.2))
    x = 0
    ticks, labels = [], []
    colors = {"DP": "#C44E52", "BDP": "#4C72B0", "DDP": "#55A868"}
    for name in names:
        m = models[name]
        dp = m["dp_peaks_by_global_batch"].get(str(int(m["dp_excess"]["batch"])), [])
        ddp = m["ddp_peaks_by_global_batch"].get(str(int(m["dp_excess"]["batch"])), [])
        for mode, peaks in (("DP", dp), ("BDP", m["bdp"]["peaks"]), ("DDP", ddp)):
            for d, p in enumerate(peaks):
                a.bar(x + d * 0.2, p / 2**30, 0.18, color=colors[mode], alpha=1.0 if d == 0 else 0.55)
            ticks.append(x + 0.3)
            labels.append(f"{name}\n{mode}")
            x += 1
        x += 0.5
    a.set_xticks(ticks)
    a.set_xticklabels(labels, fontsize=7)
    a.set_ylabel("peak allocated per device (GiB)")
    a.set_title("meta:0..3 at global batch 64 (device 0 darker)", fontsize=10)
    a.grid(axis="y", alpha=0.3)
    w = 0.25
    for i, mode in enumerate(("dp", "bdp", "ddp")):
        b.bar([j + (i - 1) * w for j in range(len(names))],
              [models[n]["largest_global_batch"][mode] for n in names], w, label=mode.upper(),
              color=colors[mode.upper()])
    b.set_xticks(range(len(names)))
    b.set_xticklabels(names)
    b.set_ylabel("largest global batch (4 x 11 GiB)")
    b.set_title("from exact linear fits of the meta peaks", fontsize=10)
    b.legend(fontsize=8)
    b.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
    s, src = doc["summary"], doc["source"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n", "\n### Ours: memory per device on meta:0..3\n"]
    rows = []
    for name, m in sorted(s["models"].items()):
        e, bd = m["dp_excess"], m["bdp"]
        rows.append([name, m["optimizer"], fmt_bytes(m["param_bytes"]), int(e["batch"]),
                     f"{e['device0_over_others']:.2f}x", fmt_bytes(e["measured_bytes"]), fmt_bytes(e["predicted_bytes"]),
                     f"{e['ratio']:.3f}", int(bd["gpu0_bsz"]), f"{100 * bd['device0_vs_others']:+.1f}%",
                     f"{bd['fit_balanced_gpu0_bsz']:.1f}", f"{100 * m['ddp']['rank_spread']:.2f}%"])
    parts.append(md_table(["model", "optimizer", "parameters", "global batch", "DP device 0 / others",
                           "DP excess", "model (state + input)", "measured / model", "BDP gpu0_bsz",
                           "BDP device 0 vs others", "balanced gpu0_bsz (fit)", "DDP rank spread"], rows))
    parts.append("\n**Largest global batch on four 11 GiB cards** (linear fits of the meta peaks; BDP with the "
                 "gpu0_bsz that fills device 0 and the others together):\n")
    parts.append(md_table(["model", "DP", "BDP", "BDP gpu0_bsz", "DDP"],
                          [[n, int(m["largest_global_batch"]["dp"]), int(m["largest_global_batch"]["bdp"]),
                            int(m["largest_global_batch"]["bdp_gpu0_bsz"]), int(m["largest_global_batch"]["ddp"])]
                           for n, m in sorted(s["models"].items())]))
    parts.append(f"\n**Throughput** ({src.get('throughput_model', 'resnet20')}, cpu logical devices on this "
                 "machine; median step time):\n")
    parts.append(md_table(["mode", "step (s)", "images/s", "DDP all-reduce hidden", "peak per device"],
                          [[k, f"{v['step_s']:.3f}", f"{v['images_per_s']:.1f}",
                            f"{100 * v['ddp_hidden_share']:.0f}%" if "ddp_hidden_share" in v else "—",
                            ", ".join(fmt_bytes(p) for p in v["peaks"])]
                           for k, v in s["throughput"].items()]))
    parts.append("\n**Same model without BatchNorm** (MLP, 10 steps, final test loss):\n")
    parts.append(md_table(["mode", "test loss", "relative difference to one device"],
                          [[k, f"{v['test_loss']:.9f}", f"{v.get('rel_diff', 0):.2e}"]
                           for k, v in s["equality"].items()]))
    fig = "figures/11_data_parallel.png"
    plot_11(doc, out_dir / fig)
    parts.append(f"\n![11_data_parallel]({fig})\n")
    return "\n".join(parts), [fig]


FIGURES = ["figures/11_data_parallel.png"]
