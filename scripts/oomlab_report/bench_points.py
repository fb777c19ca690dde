"""bench_points.py — benchmark files of reports/benchmarks/ shown in an experiment's report
section: attention_vs_torch_table() renders scripts/attention_vs_torch.py's file (oomlab's CPU
attention beside PyTorch's CPU SDPA, for experiment 15), each case's rounds as the verdict rule's
paired ratio (verdict_rule.py), with the build's sha from the file. Contract: every figure comes
from the file; a missing or malformed file gives "" (the table is left out), never an error.
Standard library only.
"""
import json

from oomlab_report.fmt import md_table
from oomlab_report.results import REPO_ROOT
from oomlab_report.verdict_rule import paired_ratio

ATTENTION_VS_TORCH = REPO_ROOT / "reports" / "benchmarks" / "attention_vs_torch_cpu.json"


def _interval(rounds):
    i = paired_ratio([x["oomlab_fused_ms"] for x in rounds], [x["torch_sdpa_ms"] for x in rounds])
    if i["estimate"] is None:
        return "—"
    return f"{i['estimate']:.2f} ({i['lo']:.2f}-{i['hi']:.2f}{'' if i['enough'] else ', range'}; {i['n']} rounds)"


def _shown(path):
    try:
        return path.resolve().relative_to(REPO_ROOT)
    except ValueError:
        return path


def attention_vs_torch_table(path=ATTENTION_VS_TORCH):
    """The CPU attention table beside PyTorch's SDPA from attention_vs_torch.py's file, or ""."""
    try:
        doc = json.loads(path.read_text())
        rows = []
        for c in doc["cases"]:
            m = c["median_ms"]
            rows.append([c["seq"], f"{100 * c['dropout']:.0f}%", f"{m['oomlab_eager_ms']:.1f}", f"{m['oomlab_fused_ms']:.1f}",
                         f"{m['torch_math_ms']:.1f}", f"{m['torch_sdpa_ms']:.1f} ({c['torch_sdpa_backend']})",
                         _interval(c["rounds"])])
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return ""
    ctx = doc.get("oomlab_context") or {}
    build = f"oomlab `{ctx.get('oomlab_git_sha', 'unknown')}`" + (" (dirty build)" if ctx.get("oomlab_git_dirty") == "true" else "")
    return "\n".join([
        "\n### On the CPU beside PyTorch's SDPA\n",
        md_table(["s", "dropout", "oomlab eager ms", "oomlab fused ms", "PyTorch math ms", "PyTorch SDPA ms (backend)",
                  "fused / SDPA (95% interval)"], rows, right={0, 1, 2, 3, 4, 5}),
        f"\n`{_shown(path)}` (scripts/attention_vs_torch.py): B 1, 12 heads, head dim 64, float32, "
        f"forward + backward, {doc.get('threads')} threads each side, {build} on {ctx.get('oomlab_cpu', 'an unnamed CPU')}, "
        f"PyTorch {doc.get('torch')}; per case {doc.get('rounds')} rounds alternating which side goes first, each side's "
        "median per round; the ratio is the verdict rule's paired ratio. PyTorch's CPU flash kernel refuses dropout, so "
        "with dropout its SDPA is the math path.\n"])
