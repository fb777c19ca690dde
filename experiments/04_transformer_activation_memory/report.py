"""report.py — the report section of experiment 04_transformer_activation_memory: Korthikanti et
al.'s activation formula (fp16 as published, fp32 ours) beside the saved bytes per encoder layer
we measure on meta against sequence length and batch, the attention core and its seq-squared
share, and one figure (measured against the formula per model).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.results import is_num
from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import fmt_bytes, md_table


def plot_04(doc, path):
    by_model = {}
    for m in doc["summary"]["rows"]:
        by_model.setdefault(m["model"], []).append(m)
    fig, axes = plt.subplots(1, len(by_model), figsize=(5.2 * len(by_model), 4.2), squeeze=False)
    for ax, (model, ms) in zip(axes[0], by_model.items()):
        ms.sort(key=lambda m: m["seq"])
        s = [m["seq"] for m in ms]
        mib = 2**20
        ax.plot(s, [m["saved_bytes_per_layer"] / mib for m in ms], "o-", label="measured (fp32)")
        ax.plot(s, [m["korthikanti_fp32_bytes"] / mib for m in ms], "s--", mfc="none",
                label="sbh(66 + 9as/h), fp32")
        ax.plot(s, [m["korthikanti_fp16_bytes"] / mib for m in ms], "^:",
                label="sbh(34 + 5as/h), paper fp16")
        ax.plot(s, [m["linear_term_bytes"] / mib for m in ms], "-", color="grey", alpha=0.5,
                label="fp32 linear part 66sbh")
        if all("attention_core_saved_bytes" in m for m in ms):
            ax.plot(s, [m["attention_core_saved_bytes"] / mib for m in ms], "d-.",
                    label="measured attention.self.core row")
        ax.set_title(f"{model} (h={ms[0]['hidden']}, a={ms[0]['heads']}, b={ms[0]['batch']})")
        ax.set_xlabel("sequence length s")
        ax.set_ylabel("activation bytes per layer (MiB)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{doc['experiment']}: saved-for-backward bytes per encoder layer", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
    src = doc["source"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n",
             f"```\nfp16 (paper): {src.get('formula_fp16')}\nfp32 (ours):  {src.get('formula_fp32')}\n```\n",
             "\n### Ours\n",
             "Measured on the meta device with saved-tensor hooks (each storage counted once); "
             "every encoder layer of a model saves the same bytes.\n"]
    rows = []
    pts = doc["summary"]["rows"]

    def pct(m, key):
        return f"{100 * m[key]:.1f}%" if is_num(m.get(key)) else "n/a"
    for m in pts:
        core = m.get("attention_core_saved_bytes")
        rows.append([m["model"], m["seq"], m["batch"], fmt_bytes(m["saved_bytes_per_layer"]),
                     fmt_bytes(m["korthikanti_fp32_bytes"]), f"{m['measured_over_fp32_formula']:.4f}",
                     fmt_bytes(m["korthikanti_fp16_bytes"]), f"{m['measured_over_fp16_formula']:.2f}×",
                     fmt_bytes(core) if is_num(core) else "n/a", pct(m, "seq_squared_share"),
                     fmt_bytes(m["training_peak_bytes"])])
    parts.append(md_table(["model", "s", "b", "measured / layer", "fp32 formula", "measured ÷ fp32",
                           "paper fp16", "measured ÷ fp16", "attention core / layer", "seq² share",
                           "training peak (AdamW)"],
                          rows, right=set(range(1, 11))))
    parts.append("*attention core / layer*: the measured saved bytes of the layer's own "
                 "`attention.self.core` row in `oomlab summary` (QK^T, masked softmax, dropout on the "
                 "probabilities, PV: the head-layout copies of q, k, v plus the seq²-sized softmax output, "
                 "dropout mask and dropped probabilities). *seq² share*: the s² part of those measured rows "
                 "(the s² coefficient of a quadratic through the core's bytes over the sweep) over the "
                 "layer's measured bytes.\n")
    # The residual sentence only where every point shows it.
    res = [m.get("residual_over_fp32_formula_bytes",
                 m["saved_bytes_per_layer"] - m["korthikanti_fp32_bytes"]) for m in pts]
    if pts and all(r == m["layernorm_stats_bytes"] for r, m in zip(res, pts)):
        parts.append("The residual over the fp32 formula equals 16·s·b bytes per layer at every point: "
                     "layer_norm's saved mean and rstd (2 LayerNorms × 2 floats × 4 bytes per token), which "
                     "the paper does not count; an fp16 run should then land on the paper's figure plus "
                     "16·s·b. The AMP experiment ([05_amp](#05_amp)) measures bert-base's activations under "
                     "fp16 autocast (the whole model, autocast's 16-bit weight copies included): see its "
                     "section.\n")
    elif pts:
        parts.append(f"The residual over the fp32 formula is {min(res):+,} to {max(res):+,} bytes per layer; "
                     "it is not layer_norm's saved mean and rstd (16·s·b) alone at every point.\n")
    fig = "figures/04_transformer_activation_memory.png"
    plot_04(doc, out_dir / fig)
    parts.append(f"![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


FIGURES = ["figures/04_transformer_activation_memory.png"]
