"""report.py — the report section of experiment 15_fused_attention: the source's claims
(Dao et al. 2022, and PyTorch's SDPA on the H100 record), one table per sequence length
(per-sample and fixed bytes, the quadratic share, the largest batch under 11 GiB, eager
against fused) and one figure (per-sample bytes and the largest batch against the length). The GPU
side: the newest GPU kit record with eager and flash fused attention (oomlab_report/gpu_points.py).
The CPU beside PyTorch's CPU SDPA: oomlab_report/bench_points.py's table of
reports/benchmarks/attention_vs_torch_cpu.json (left out when the file is missing).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table
from oomlab_report.gpu_points import gpu_table
from oomlab_report.bench_points import attention_vs_torch_table

FIG = "figures/15_fused_attention.png"


def plot_15(doc, path):
    mem = doc["summary"]["memory"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for att in ("eager", "fused"):
        rows = mem.get(att, {}).get("rows", [])
        xs = [r["seq"] for r in rows]
        a.plot(xs, [r["saved_per_sample_bytes"] / 2**30 for r in rows], "o-", label=att)
        pts = [(r["seq"], r["largest_batch"]) for r in rows if isinstance(r.get("largest_batch"), (int, float))]
        b.plot([x for x, _ in pts], [max(y, 0) for _, y in pts], "o-", label=att)
    for ax, ylabel in ((a, "activations saved per sample (GiB, exact)"), (b, "largest batch under 11 GiB")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    b.set_yscale("symlog", linthresh=1)
    b.set_ylim(bottom=0)
    fig.suptitle(f"{doc['experiment']}: BERT-base AdamW, eager vs fused attention (meta)", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def batch(r):
    v = r.get("largest_batch")
    return int(v) if isinstance(v, (int, float)) else "n/a"


def render(doc, out_dir):
    s = doc["summary"]
    parts = ["### Source\n", f"{doc['source'].get('citation', '')}\n", "\n### Ours (exact meta peaks)\n"]
    E, F = s["memory"]["eager"]["rows"], s["memory"]["fused"]["rows"]
    parts.append(md_table(
        ["seq", "eager MiB saved/sample", "fused MiB saved/sample", "eager s^2 share", "eager batch", "fused batch"],
        [[e["seq"], f"{e['saved_per_sample_bytes'] / 2**20:.1f}", f"{f['saved_per_sample_bytes'] / 2**20:.1f}",
          f"{100 * e['quadratic_share']:.1f}%", batch(e), batch(f)]
         for e, f in zip(E, F)], right={0, 1, 2, 3, 4, 5}))
    a = s["anchor_b24_s384"]
    if "eager" in a and "fused" in a:
        parts.append(f"\nBERT-base b24 s384 (the H100 record's configuration): eager {a['eager'] / 1e9:.2f} GB, "
                     f"fused {a['fused'] / 1e9:.2f} GB (GB = 10^9 B; PyTorch on the H100: eager 11.87, SDPA 7.35).\n")
    gpu = gpu_table([("BERT-base b24 s384 TF32 (oomlab fused: the flash kernels; PyTorch: SDPA)", "bert384_none",
                      "bert384_fused_flash", "bert384_none", "bert384_none_sdpa")],
                    base="eager", other="fused", peaks=True)
    cpu = attention_vs_torch_table()
    if cpu:
        parts.append(cpu)
    if gpu:
        parts += ["\n### On a GPU (the GPU kit)\n", gpu]
    plot_15(doc, out_dir / FIG)
    parts.append(f"\n![{doc['experiment']}]({FIG})\n")
    return "\n".join(parts), [FIG]


FIGURES = [FIG]
