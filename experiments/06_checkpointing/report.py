"""report.py — the report section of experiment 06_checkpointing: the source's
BERT checkpointing table beside our exact meta peaks per policy and batch, the largest batch
that fits the capacity, time and accuracy, and one figure (peak against batch per policy; memory
reduction against time overhead per policy). The time overhead shown, in the table and the
figure, is the verdict rule's one estimator: the summary's paired ratio over alternating
rounds with its 95% interval (time_ratio_interval); per-policy step times appear only as
medians over the rounds, labelled so.

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.results import is_num
from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table, ratio_interval_text


def plot_06(doc, path):
    src, summ = doc["source"], doc["summary"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.3))
    series = {}
    for p in doc["points"]:
        if p.get("command") != "estimate" or p.get("options", {}).get("model") != "bert-base":
            continue
        if p.get("outcome", {}).get("status") != "ok":
            continue
        series.setdefault(p["axes"]["checkpoint"], []).append(
            (p["axes"]["batch"], p["metrics"]["exact"]["peak_allocated_bytes"] / 2**20))
    for pol, pts in series.items():
        pts.sort()
        ax.plot([b for b, _ in pts], [m for _, m in pts], "o-", label=f"ours: {pol}")
    ax.axhline(src["capacity_gib"] * 1024, color="grey", ls=":", label=f"{src['capacity_gib']} GiB card")
    mb = 1e6 / 2**20   # the source's MB (10^6 bytes) in MiB
    ax.plot([src["batch_without"]], [src["memory_mb_without"] * mb], "kx", ms=9, label="source: no checkpoint")
    ax.plot([src["batch_without"], src["batch_with"]],
            [src["memory_mb_with"] * mb, 10212 * mb], "k+", ms=10, label="source: checkpoint")
    ax.set_xlabel("batch")
    ax.set_ylabel("training peak (MiB)")
    ax.set_title("bert-base, seq 384, AdamW, fp32 (meta, exact)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    rows = [r for r in summ["bert_mini"] if is_num(r.get("activation_reduction_x"))]
    for r in rows:
        x, y = 100 * r["time_overhead"], r["activation_reduction_x"]
        ci = r.get("time_ratio_interval") or {}
        if is_num(ci.get("lo")) and is_num(ci.get("hi")) and ci["hi"] > ci["lo"]:
            bx.errorbar([x], [y], xerr=[[x - 100 * (ci["lo"] - 1)], [100 * (ci["hi"] - 1) - x]], fmt="o", capsize=3)
        else:
            bx.plot(x, y, "o")
        bx.annotate(r["policy"], (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points")
    bx.axhline(src["target_activation_reduction"], color="#C44E52", ls=":", lw=0.8)
    bx.axvline(100 * src["target_time_overhead"], color="#C44E52", ls=":", lw=0.8,
               label="bar: >= 3x less for <= +30% time")
    bx.set_xlabel("time per step vs none, %: paired ratio over the rounds (95% CI)")
    bx.set_ylabel("activation memory reduction (x)")
    bx.set_title("bert-mini, batch 32, seq 128 (CPU time, meta bytes)", fontsize=9)
    bx.grid(alpha=0.3)
    bx.legend(fontsize=7)
    fig.suptitle(f"{doc['experiment']}: memory and time per checkpoint policy", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def median(values):
    v = sorted(x for x in values if is_num(x))
    if not v:
        return None
    return v[len(v) // 2] if len(v) % 2 else (v[len(v) // 2 - 1] + v[len(v) // 2]) / 2


def mini_table(doc):
    """bert-mini per policy: activations (meta, exact), the time overhead as the verdict rule
    estimates it (the paired ratio over the alternating rounds: each round runs every policy
    once, and the ratio is the geometric mean of that round's policy / none, with its 95% t
    interval; the summary's time_ratio_interval), and, for reference only, the median over the
    rounds of each round's median step time (the summary's step_s_runs)."""
    summ = doc["summary"]
    rows = []
    rounds = max((len(r.get("step_s_runs") or []) for r in summ["bert_mini"]), default=0)
    for r in sorted(summ["bert_mini"], key=lambda r: r.get("activation_reduction_x", 0)):
        ci = r.get("time_ratio_interval")
        if r["policy"] == "none":
            ratio = "1 (the reference)"
        elif ci:
            ratio = f"{ratio_interval_text(ci)}, {100 * (ci['estimate'] - 1):+.0f}%"
        else:
            ratio = f"{1 + r['time_overhead']:.2f}x (unpaired runs: not the rule's estimator)"
        runs = [v for v in r.get("step_s_runs") or [] if is_num(v)]
        med = median(runs)
        step = (f"{1e3 * med:.0f} ms ({1e3 * min(runs):.0f}-{1e3 * max(runs):.0f})" if len(runs) > 1 else
                f"{1e3 * med:.0f} ms" if med is not None else "n/a")
        rows.append([r["policy"], f"{r['activation_mib']:.0f} MiB" if is_num(r.get("activation_mib")) else "n/a",
                     f"{r['activation_reduction_x']:.2f}x" if is_num(r.get("activation_reduction_x")) else "n/a",
                     ratio, step, f"{100 * r['final_test_accuracy']:.1f}%",
                     "yes" if r["loss_history_identical"] else "NO"])
    intro = (f"\nbert-mini, batch 32, seq 128: activations kept after forward (meta, exact); time on the CPU "
             f"({doc['context'].get('cpu', 'cpu')}, a shared machine), {rounds} alternating rounds of "
             f"{summ['steps']} steps, each round running every policy once. **Time vs none** is the verdict "
             "rule's estimator: the paired ratio, the geometric mean over the rounds of policy / none within "
             "a round, with its 95% interval. The step medians beside it are descriptive only (the median, "
             "over the rounds, of each round's median step, and their range): the ratio of two of them is "
             "not the estimator and can differ from it, since the machine's speed drifts between rounds.\n")
    return [intro, md_table(["policy", "activations", "reduction", "time vs none (paired ratio, 95% CI)",
                             f"median step over {rounds} rounds (range)", "test accuracy", "loss history = none"],
                            rows, right={1, 2, 3, 4, 5})]


def render(doc, out_dir):
    src, summ = doc["source"], doc["summary"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n"]
    parts.append(md_table(["", "no checkpoint", "checkpoint (attention + GELU)"],
                          [[f"memory at batch {src['batch_without']}, MB (10^6 B)", f"{src['memory_mb_without']:,}",
                            f"{src['memory_mb_with']:,}"],
                           [f"largest batch ({src['capacity_gib']} GiB card)", src["batch_without"], src["batch_with"]],
                           ["time overhead", "", f"+{100 * src['time_overhead']:.0f}%"]]))
    parts.append("\n### Ours\n")
    parts.append("Our bytes are MiB (2^20 B); the source's MB are read as 10^6 B (the figure converts them).\n")
    rows = []
    for r in summ["bert_base"]:
        at = r.get("peak_mib_at_source_batch")
        red = r.get("reduction_at_source_batch")
        rows.append([r["policy"], f"{at:,.0f} MiB" if is_num(at) else "n/a",
                     f"{-100 * red:.0f}%" if is_num(red) else "n/a", f"{r['per_sample_mib']:.1f} MiB",
                     f"{r['max_batch_in_capacity']:.0f}"])
    parts.append(f"bert-base, seq 384, AdamW, fp32, exact meta-device peaks; largest batch under "
                 f"{src['capacity_gib']} GiB from a linear fit over the measured batches.\n")
    parts.append(md_table(["policy", f"peak at batch {summ['source_batch']}", "vs none", "per sample",
                           "largest batch"], rows, right={1, 2, 3, 4}))
    parts += mini_table(doc)
    chen = summ.get("chen_depth") or []
    if chen:
        layers = [q["layers"] for q in chen[0]["points"]]
        rows = [[c["policy"]] + [f"{q['activation_mib']:,.0f} MiB" for q in c["points"]] +
                [f"{c['depth_exponent']:.2f}"] for c in chen]
        parts.append("\nChen et al. 2016, memory vs depth: bert-mini (seq 128, batch 8) with more encoder "
                     "layers, activations kept after forward (meta, exact) and the exponent of a log-log fit "
                     "(1 = linear in depth, 0.5 = sqrt).\n")
        parts.append(md_table(["policy"] + [f"{int(n)} layers" for n in layers] + ["exponent"], rows,
                              right=set(range(1, len(layers) + 2))))
    fig = "figures/06_checkpointing.png"
    plot_06(doc, out_dir / fig)
    parts.append(f"![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


FIGURES = ["figures/06_checkpointing.png"]
