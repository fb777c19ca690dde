"""report.py — the report section of experiment 19_what_fits: per (model, card) what the
formula calculators say, the plain fp32 step's exact need, and oomlab plan's recommendation
with its predicted time (one table), and one figure (exact peak of the plain step against
DeepSpeed's formula, per model, on the 24 GB card).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table

FIG = "figures/19_what_fits.png"


def gib(b):
    return f"{b / 2**30:.2f}"


def techniques(r):
    t = [r["precision"]]
    if r["checkpoint"] != "none":
        t.append("ckpt " + r["checkpoint"])
    if r["attention"] == "fused":
        t.append("fused attn")
    if r.get("channels_last"):
        t.append("channels-last")
    if r.get("fuse_relu"):
        t.append("fuse-relu")
    return ", ".join(t)


def plot_19(doc, path):
    rows = [r for r in doc["summary"]["rows"] if r["gpu"] == "rtx4090" and "plain" in r]
    fig, ax = plt.subplots(figsize=(10, 3.8))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["deepspeed_zero2_bytes"] / 2**30 for r in rows], 0.4,
           label="DeepSpeed ZeRO-2 formula (20 B/param)")
    ax.bar([x + 0.2 for x in xs], [r["plain"]["peak_bytes"] / 2**30 for r in rows], 0.4,
           label="exact: plain fp32 step at its largest micro-batch")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([r["model"] for r in rows], fontsize=8, rotation=20)
    ax.set_ylabel("GiB")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.suptitle(f"{doc['experiment']}: on a 24 GB card (rtx4090), AdamW", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
    s = doc["summary"]
    cal = s.get("calibration") or {}
    parts = ["### Source\n", f"{doc['source'].get('citation', '')}\n",
             "\n### Ours (oomlab plan on meta; times predicted by the calibrated model, "
             f"leave-one-configuration-out median error {100 * cal.get('median_relative_error', 0):.1f}% over "
             f"{cal.get('pairs', 0)} GPU-record pairs)\n"]
    table = []
    for r in s["rows"]:
        plain = r.get("plain", {})
        rec = r.get("recommended")
        table.append([
            r["model"], r["gpu"], f"{r['params'] / 1e6:.1f}M", str(r["global_batch"]),
            gib(r["accelerate_bytes"]), gib(r["deepspeed_zero2_bytes"]), "yes" if r["formula_fits"] else "no",
            f"{plain.get('micro_batch', 0)} x {plain.get('accumulate', 0)}" if plain.get("fits") else "no",
            gib(plain["peak_bytes"]) if plain else "-",
            techniques(rec) if rec else "nothing fits",
            f"{rec['micro_batch']} x {rec['accumulate']}" if rec else "-",
            gib(rec["peak_bytes"]) if rec else gib(r.get("smallest_peak_bytes", 0)),
            f"{rec['predicted_ms']:.0f}" if rec else "-",
            f"{rec['samples_per_s']:.0f}" if rec else "-"])
    parts.append(md_table(
        ["model", "card", "params", "batch", "accelerate GiB", "DeepSpeed GiB", "formula fits", "plain fp32",
         "plain peak GiB", "plan: techniques", "micro x accum", "peak GiB", "step ms", "samples/s"],
        table, right={2, 3, 4, 5, 8, 11, 12, 13}))
    plot_19(doc, out_dir / FIG)
    parts.append(f"\n![{doc['experiment']}]({FIG})\n")
    return "\n".join(parts), [FIG]


FIGURES = [FIG]
