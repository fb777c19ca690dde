"""report.py — the report section of experiment 08_oom_recovery: the source's
advice (catch the OOM, free, skip the batch), one row per --on-oom policy (outcome, steps,
samples lost, batches split, training time against the uncapped run (single runs: shown,
not judged), accuracy) and one figure (training loss per step for uncapped, skip and split,
with the batches skip dropped and split retried marked).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.results import is_num
from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table

POLICIES = ("uncapped", "raise", "skip", "split")


def point_for(doc, policy):
    for p in doc["points"]:
        if p.get("axes", {}).get("policy") == policy:
            return p
    return None


def plot_08(doc, path):
    fig, ax = plt.subplots(figsize=(7, 4))
    pol = doc["summary"]["policies"]
    for policy, style in (("uncapped", "-"), ("skip", "--"), ("split", ":")):
        p = point_for(doc, policy)
        if not p or p["outcome"]["status"] != "ok":
            continue
        loss = p["metrics"]["history"]["train_loss"]
        ax.plot(range(1, len(loss) + 1), [v if is_num(v) else float("nan") for v in loss], style, label=policy)
    split = pol.get("split", {})
    for i, b in enumerate(split.get("split_batch_indices", [])):
        ax.axvline(b + 1, color="tab:green", alpha=0.3, label="split (long batch)" if i == 0 else None)
    raise_ = pol.get("raise", {})
    if is_num(raise_.get("died_at_step")):
        ax.axvline(raise_["died_at_step"], color="tab:red", alpha=0.6, label="raise died")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.set_title(f"{doc['experiment']}: bert-mini with rare 512-token sequences, capped device", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_fig_atomic(fig, path)


def render(doc, out_dir):
    src, pol = doc["source"], doc["summary"]["policies"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n",
             f"\n### Ours (bert-mini on synthetic-seq, CPU; capped policies at --device-memory {src['capacity']})\n"]
    ref = pol.get("uncapped", {})
    rows = []
    for name in POLICIES:
        r = pol.get(name)
        if r is None:
            continue
        if r["status"] != "ok":
            rows.append([name, f"{r['status']} at step {r.get('died_at_step', '?')}", "", "", "", "", ""])
            continue
        t = r["train_seconds"]
        rel = f"{t / ref['train_seconds']:.2f}x" if ref.get("status") == "ok" and ref["train_seconds"] else ""
        acc = r.get("final_test_accuracy")
        rows.append([name, "ok", r["steps"], f"{r['samples_lost']} ({r['samples_lost_pct']:.2f}%)",
                     r["split_batches"], f"{t:.1f} s ({rel})", f"{100 * acc:.1f}%" if is_num(acc) else "n/a"])
    parts.append(md_table(["--on-oom", "outcome", "steps", "samples lost", "batches split",
                           "training time (× uncapped) \\*", "test accuracy"], rows, right={2, 3, 4, 5, 6}))
    cores = doc["context"].get("num_cpus")
    where = f"a {cores}-core machine" if is_num(cores) else "a machine"
    parts.append(f"\n\\* The training-time ratios are single runs (one point per policy, one after another) on "
                 f"{where} that other work may share: not judged (the rule needs at least 5 alternating pairs); "
                 "the verdict rests on the exact counts alone.\n")
    fig = "figures/08_oom_recovery.png"
    plot_08(doc, out_dir / fig)
    parts.append(f"\n![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


FIGURES = ["figures/08_oom_recovery.png"]
