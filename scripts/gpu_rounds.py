"""gpu_rounds.py — the GPU kit's repeated pairs (gpu_run.sh with OOMLAB_KIT_REPEAT=R: every
selected configuration run R times, oomlab then PyTorch, round after round) judged by the
report's verdict rule, for gpu_report.py (which the kit runs; standard library only).

Inputs: WORK/res/oomlab_<tag>.json (round 1) and WORK/res/rounds/<r>/oomlab_<tag>.json
(round r >= 2); PyTorch's records with their "round" (torch_bench.py `run TAG ROUND`).
Per configuration with at least two rounds whose both sides have a median, the pairs
(oomlab median, its PyTorch twin's median) of the same round give the ratio as
experiments/runner/verdict_rule.cpp computes it: the geometric mean of the per-pair ratios
with a 95% Student-t interval on their logarithms, "enough" from 5 pairs (kMinTimingPairs).
A configuration with one of issue 31's GPU bars (ISSUE31_BARS: oomlab's step at most
bar x PyTorch eager's, BERT's against PyTorch with SDPA attention) is judged as the rule
judges a threshold claim (judge_threshold): met when the whole interval is below the bar, not
met when it is wholly above, inconclusive when it straddles the bar or there are fewer than 5
pairs.
"""
import json
from pathlib import Path

from oomlab_report.verdict_rule import MIN_PAIRS, paired_ratio

# tag -> (PyTorch twin tag, bar): issue 31's "at the next GPU lease" bars, like for like.
ISSUE31_BARS = {
    "r50_tf32": ("r50_tf32", 0.90), "r50_bf16": ("r50_bf16", 0.90), "r50_fp16": ("r50_fp16", 0.90),
    "vgg16_tf32": ("vgg16_tf32", 0.90),
    "bert_fp32": ("bert_fp32_sdpa", 0.90), "bert_tf32": ("bert_tf32_sdpa", 0.90), "bert_bf16": ("bert_bf16_sdpa", 0.90),
    "r50_bf16_cudagraphs": ("r50_bf16", 0.80),   # --cuda-graphs against PyTorch eager
    # the same BERT bars for oomlab's fused attention (like with like: SDPA is PyTorch's) and for
    # the fp32 row under the NEXT switches (what flipping them would give)
    "bert_fp32_fused": ("bert_fp32_sdpa", 0.90), "bert_tf32_fused": ("bert_tf32_sdpa", 0.90),
    "bert_bf16_fused": ("bert_bf16_sdpa", 0.90), "bert_fp32_next": ("bert_fp32_sdpa", 0.90),
    "bert_bf16_fused_mma": ("bert_bf16_sdpa", 0.90),
}


def judge_at_most(interval, bar):
    """The claim "the ratio is at most `bar`" under the rule: met / not met / inconclusive."""
    if not interval["enough"]:
        return f"inconclusive (too few pairs: {interval['n']} of {MIN_PAIRS})"
    if interval["lo"] > bar:   # verdict_rule.cpp's judge_threshold, claim "below the bar"
        return "not met"
    if interval["hi"] < bar or interval["lo"] == interval["hi"]:
        return "met"
    return "inconclusive (the interval straddles the bar)"


def _median_ms(doc):
    st = ((doc or {}).get("metrics") or {}).get("step_time_s") or {}
    m = st.get("median")
    return 1e3 * m if isinstance(m, (int, float)) else None


def load_json(path):
    """A JSON file's document, or None when it is missing or malformed (gpu_report.py's too)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def collect(res, torch_by_round):
    """{tag: {"twin", "oomlab_ms": [...], "torch_ms": [...], "rounds": [...], "ratio": interval,
    "bar", "verdict"}} for every tag run in two rounds or more; torch_by_round is
    {tag: {round: PyTorch's record}}."""
    res = Path(res)
    oomlab = {}   # tag -> {round: median ms}
    for p in res.glob("oomlab_*.json"):
        oomlab.setdefault(p.stem[len("oomlab_"):], {})[1] = _median_ms(load_json(p))
    for d in sorted((res / "rounds").glob("*")) if (res / "rounds").is_dir() else []:
        if d.name.isdigit():
            for p in d.glob("oomlab_*.json"):
                oomlab.setdefault(p.stem[len("oomlab_"):], {})[int(d.name)] = _median_ms(load_json(p))
    out = {}
    for tag, by_round in sorted(oomlab.items()):
        if len(by_round) < 2:
            continue
        twin, bar = ISSUE31_BARS.get(tag, (tag, None))
        theirs = torch_by_round.get(twin, {})
        rounds = [r for r in sorted(by_round) if by_round[r] and (theirs.get(r) or {}).get("median_ms")]
        a = [by_round[r] for r in rounds]
        b = [theirs[r]["median_ms"] for r in rounds]
        ratio = paired_ratio(a, b)
        row = {"twin": twin, "rounds": rounds, "oomlab_ms": a, "torch_ms": b, "ratio": ratio}
        if bar is not None:
            row["bar"] = bar
            row["verdict"] = judge_at_most(ratio, bar)
        out[tag] = row
    return out


def _f(v, spec):
    return "—" if v is None else format(v, spec)


def readme_lines(rounds):
    """The record README's table of repeated pairs; [] when the run repeated nothing."""
    if not rounds:
        return []
    lines = ["## Repeated pairs (OOMLAB_KIT_REPEAT: oomlab then PyTorch, round after round)", "",
             "The ratio is the geometric mean of the per-round ratios with a 95% Student-t interval on their "
             f"logarithms (the verdict rule, docs/VERDICTS.md; at least {MIN_PAIRS} pairs to judge); a bar is met when the whole "
             "interval is below it.", "",
             "| config | PyTorch twin | pairs | oomlab ms (per round) | PyTorch ms (per round) | ratio | 95% interval "
             "| bar | verdict |", "|---|---|---|---|---|---|---|---|---|"]
    for tag, r in rounds.items():
        i = r["ratio"]
        lines.append(f"| {tag} | {r['twin']} | {i['n']} | {', '.join(_f(x, '.1f') for x in r['oomlab_ms'])} | "
                     f"{', '.join(_f(x, '.1f') for x in r['torch_ms'])} | {_f(i['estimate'], '.3f')} | "
                     f"{_f(i['lo'], '.3f')}-{_f(i['hi'], '.3f')}{'' if i['enough'] else ' (range)'} | "
                     f"{_f(r.get('bar'), '.2f')} | {r.get('verdict', '—')} |")
    return lines + [""]
