"""report.py — the report section of experiment 09_practical_tricks: one row per trick
of the source's T9 list (claim, our numbers, verdict and its reason) under a headline that
counts every row once by its status (so the counts add up to the rows), and one figure (the
measured activation bytes against batch size, resnet18, and against sequence length,
bert-mini, the two scaling claims), and trick 10's GPU side where a GPU kit record has it
(oomlab_report/gpu_points.py: ResNet-50 with pageable and with pinned batches, both sides).

Contract (oomlab_report/experiments.py): render(doc, out_dir) returns (markdown, figure
paths relative to out_dir) and draws exactly FIGURES."""
import matplotlib.pyplot as plt

from oomlab_report.atomic import save_fig_atomic
from oomlab_report.fmt import md_table
from oomlab_report.gpu_points import gpu_table


def _series(doc, block, axis):
    pts = []
    for p in doc["points"]:
        if p.get("name", "").split(" ")[0] == block and p["outcome"]["status"] == "ok":
            pts.append((float(p["axes"][axis]), p["metrics"]["exact"]["activation_bytes"] / 2**20))
    return sorted(pts)


def plot_09(doc, path):
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.8))
    for a, block, axis, label, xlabel in ((ax, "batch", "batch", "resnet18 3x224x224", "batch size"),
                                          (bx, "seq", "seq-len", "bert-mini, batch 8", "sequence length (tokens)")):
        pts = _series(doc, block, axis)
        if pts:
            a.plot([x for x, _ in pts], [y for _, y in pts], "o-", label=label)
        a.set_xlabel(xlabel)
        a.set_ylabel("activation memory (MiB, exact)")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    fig.suptitle(f"{doc['experiment']}: tricks 1 and 11 (linear in batch; linear + quadratic in length)", fontsize=10)
    fig.tight_layout()
    save_fig_atomic(fig, path)


STATUS_WORDS = (("confirmed", "confirmed"), ("depends", "depend on the setting"), ("refuted", "refuted"),
                ("inconclusive", "inconclusive"), ("pending", "pending a GPU"))


def headline(rows):
    """Every trick counted once by its row's status (the summary's rows, all of them), with the
    tricks' numbers: the counts add up to the number of rows."""
    by = {}
    for r in rows:
        by.setdefault(r["status"], []).append(str(r["id"]))
    known = [k for k, _ in STATUS_WORDS]
    words = STATUS_WORDS + tuple((k, k) for k in by if k not in known)
    counts = [f"{len(by[k])} {w} ({', '.join(by[k])})" for k, w in words if by.get(k)]
    text = (f"**{len(rows)} tricks**, each judged once by its row below (CPU and the meta device): "
            + "; ".join(counts) + ".")
    text += (" The GPU sides, cudnn.benchmark (trick 8) and pinned host memory (part of trick 10), are the "
             "gpu profile's claims, judged from its points: see GPU points below.")
    return text + "\n"


def render(doc, out_dir):
    src, rows = doc["source"], doc["summary"]["rows"]
    parts = ["### Source\n", f"{src.get('citation', '')}\n", "\n### Ours, trick by trick\n", headline(rows)]
    parts.append(md_table(["#", "claim", "ours", "verdict", "why"],
                          [[r["id"], r["claim"], r["ours"], f"**{r['status']}**", r["reason"]] for r in rows],
                          right={0}))
    gpu = gpu_table([("ResNet-50 b128 TF32", "r50_tf32", "r50_tf32_pin")], base="pageable", other="pinned")
    if gpu:
        parts += ["\n### Trick 10 on a GPU (the GPU kit; each side's pinned batches beside its pageable ones)\n", gpu]
    fig = "figures/09_practical_tricks.png"
    plot_09(doc, out_dir / fig)
    parts.append(f"\n![{doc['experiment']}]({fig})\n")
    return "\n".join(parts), [fig]


FIGURES = ["figures/09_practical_tricks.png"]
