"""report.py — the report section of experiment 20_zero: per (stage, ranks) the rank's model
states per parameter beside the ZeRO paper's formula, both at the paper's 7.5B parameters in
GB, and the bytes sent per step beside DDP's (one table); the whole peak with activations per
(stage, checkpointing) at 64 ranks and the largest model whose model states fit an 80 GB card
at 8 ranks (two short tables); with ZeRO-Offload the device's and the host's bytes per
parameter beside the paper's split (a table); step time on two CPU thread ranks over DDP's (a
table); one figure (model states per parameter against
the ranks).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table

FIG = "figures/20_zero.png"
STAGES = {"ddp": "DDP (baseline)", "zero1": "ZeRO-1 (P_os)", "zero2": "ZeRO-2 (P_os+g)",
          "zero3": "ZeRO-3 (P_os+g+p)"}


def plot_20(doc, path):
    rows = doc["summary"]["rows"]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for stage, label in STAGES.items():
        rs = sorted((r for r in rows if r["stage"] == stage), key=lambda r: r["ranks"])
        ax.plot([r["ranks"] for r in rs], [r["per_param"] for r in rs], "o", label=f"{label}: ours (meta, exact)")
        ax.plot([r["ranks"] for r in rs], [r["formula_per_param"] for r in rs], "-", alpha=0.5,
                label=f"{label}: paper's formula")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("data-parallel ranks Nd")
    ax.set_ylabel("model-state bytes per parameter")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(f"{doc['experiment']}: mixed-precision AdamW (K = 12), one rank's model states", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
    s = doc["summary"]
    parts = ["### Source\n", f"{doc['source'].get('citation', '')}\n",
             "\n### Ours (`oomlab estimate` on meta: one rank of Nd, exact; scaled to 7.5B parameters)\n"]
    table = [[STAGES[r["stage"]], str(r["ranks"]), f"{r['params'] / 1e9:.2f}B", f"{r['per_param']:.4f}",
              f"{r['formula_per_param']:.4f}", f"{r['ours_gb_at_paper_params']:.2f}",
              f"{r['formula_gb_at_paper_params']:.2f}", f"{r['bytes_sent'] / 2**20:.1f}",
              f"{r['ddp_bytes_sent'] / 2**20:.1f}"] for r in s["rows"]]
    parts.append(md_table(["stage", "Nd", "params", "ours B/param", "paper B/param", "ours GB at 7.5B",
                           "paper GB at 7.5B", "sent MiB/step", "DDP sent MiB/step"], table,
                          right={1, 2, 3, 4, 5, 6, 7, 8}))
    peaks = [[STAGES[r["stage"]], r["checkpoint"], f"{r['model_state_bytes'] / 2**30:.2f}",
              f"{r['peak_bytes'] / 2**30:.2f}", f"{r['peak_reserved_bytes'] / 2**30:.2f}"] for r in s["peaks"]]
    parts += ["\nThe whole peak of one rank of 64 (4 x 512 tokens), which the paper's table leaves out:\n",
              md_table(["stage", "checkpoint", "model states GiB", "peak allocated GiB", "peak reserved GiB"],
                       peaks, right={2, 3, 4})]
    if s["largest"]:
        big = [[STAGES[r["stage"]], str(r["ranks"]), f"{r['params'] / 1e9:.1f}B"] for r in s["largest"]]
        parts += ["\nThe largest model whose model states fit an 80 GB card (ours per parameter):\n",
                  md_table(["stage", "Nd", "parameters"], big, right={1, 2})]
    if s.get("offload"):
        off = [[r["stage"], str(r["ranks"]), f"{r['device_per_param']:.4f}", f"{r['formula_device_per_param']:.4f}",
                f"{r['host_per_param']:.4f}", f"{r['formula_host_per_param']:.4f}",
                f"{r['device_gb_at_paper_params']:.2f}", f"{r['host_gb_at_paper_params']:.2f}"] for r in s["offload"]]
        parts += [f"\nZeRO-Offload ({doc['source'].get('offload_citation', '')}): one rank's model states on the "
                  "device and what it keeps on the host (bytes per parameter; GB at 7.5B):\n",
                  md_table(["stage + offload", "Nd", "device B/param", "paper", "host B/param", "paper",
                            "device GB at 7.5B", "host GB at 7.5B"], off, right={1, 2, 3, 4, 5, 6, 7})]
    times = [[STAGES.get(r["stage"], r["stage"]), f"{r['median_step_s'] * 1e3:.1f}",
              f"{r['over_ddp']['estimate']:.3f} ({r['over_ddp']['lo']:.3f}-{r['over_ddp']['hi']:.3f}, "
              f"{r['over_ddp']['n']} pairs)" if "over_ddp" in r else "-"] for r in s.get("step_time_cpu", [])]
    if times:
        parts += ["\nStep time on two CPU thread ranks (resnet20, 16 samples per rank, AdamW; DDP and each stage "
                  "alternating; measured, not judged: the paper's time claims concern GPUs and their network):\n",
                  md_table(["stage", "median step ms", "over DDP (95% CI)"], times, right={1, 2})]
    plot_20(doc, out_dir / FIG)
    parts.append(f"\n![{doc['experiment']}]({FIG})\n")
    return "\n".join(parts), [FIG]


FIGURES = [FIG]
