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
Issue 54's bars (ISSUE54_BARS) judge the same rounds against PyTorch's best eager
configuration (torch_bench.py's TAG@best: channels-last under AMP, SDPA, fused AdamW, foreach
SGD), and the ratio against torch.compile of it (TAG@compile) is reported beside, unjudged. A
pair whose p90/p10 exceeds NOISY_SPREAD on either side (oomlab's step_time_s, PyTorch's
p10_ms / p90_ms) is noisy: counted, and left out of the ratio.
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


# tag -> (PyTorch twin tag, bar): issue 54's bars against PyTorch's best eager configuration,
# oomlab in its own configurations (its channels-last and fused-attention rows included).
ISSUE54_BARS = {
    "r50_tf32": ("r50_tf32@best", 0.90), "r50_bf16": ("r50_bf16@best", 0.90), "r50_fp16": ("r50_fp16@best", 0.90),
    "r50_tf32_cl": ("r50_tf32@best", 0.90), "r50_bf16_cl": ("r50_bf16@best", 0.90),
    "vgg16_tf32": ("vgg16_tf32@best", 0.90),
    "bert_fp32": ("bert_fp32@best", 0.90), "bert_tf32": ("bert_tf32@best", 0.90),
    "bert_bf16": ("bert_bf16@best", 0.90), "bert_fp16": ("bert_fp16@best", 0.90),
    "bert_fp32_fused": ("bert_fp32@best", 0.90), "bert_tf32_fused": ("bert_tf32@best", 0.90),
    "bert_bf16_fused": ("bert_bf16@best", 0.90),
    "bert384_fused": ("bert384_none@best", 1.0), "bert384_fused_bf16": ("bert384_bf16_sdpa@best", 1.0),
    "graph_gpt2_tf32": ("graph_gpt2_tf32@best", 1.0),
}
NOISY_SPREAD = 1.3   # p90 / p10 of a side's timed steps above this: the pair is noisy


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


def _spread(p10, p90):
    """p90 / p10, or None when either is missing or p10 is not positive."""
    ok = isinstance(p10, (int, float)) and isinstance(p90, (int, float)) and p10 > 0
    return p90 / p10 if ok else None


def _oomlab_round(doc):
    """(median ms, p90/p10) of an oomlab results document."""
    st = ((doc or {}).get("metrics") or {}).get("step_time_s") or {}
    return _median_ms(doc), _spread(st.get("p10"), st.get("p90"))


def pair_rounds(ours, theirs):
    """The rounds both sides measured, split into kept and noisy ones: ours {round: (ms,
    spread)}, theirs {round: PyTorch's record}. Returns (rounds, oomlab ms, PyTorch ms, noisy rounds)."""
    rounds, a, b, noisy = [], [], [], []
    for r in sorted(ours):
        ms, spread = ours[r]
        rec = theirs.get(r) or {}
        if not ms or not rec.get("median_ms"):
            continue
        spreads = (spread, _spread(rec.get("p10_ms"), rec.get("p90_ms")))
        if any(x is not None and x > NOISY_SPREAD for x in spreads):
            noisy.append(r)
            continue
        rounds.append(r)
        a.append(ms)
        b.append(rec["median_ms"])
    return rounds, a, b, noisy


def against(ours, torch_by_round, twin, bar=None):
    """One twin's paired ratio over the kept rounds, with its verdict when it has a bar."""
    rounds, a, b, noisy = pair_rounds(ours, torch_by_round.get(twin, {}))
    row = {"twin": twin, "rounds": rounds, "oomlab_ms": a, "torch_ms": b, "noisy_rounds": noisy,
           "ratio": paired_ratio(a, b)}
    if bar is not None:
        row["bar"] = bar
        row["verdict"] = judge_at_most(row["ratio"], bar)
    return row


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
    oomlab = {}   # tag -> {round: (median ms, p90/p10)}
    for p in res.glob("oomlab_*.json"):
        oomlab.setdefault(p.stem[len("oomlab_"):], {})[1] = _oomlab_round(load_json(p))
    for d in sorted((res / "rounds").glob("*")) if (res / "rounds").is_dir() else []:
        if d.name.isdigit():
            for p in d.glob("oomlab_*.json"):
                oomlab.setdefault(p.stem[len("oomlab_"):], {})[int(d.name)] = _oomlab_round(load_json(p))
    out = {}
    for tag, by_round in sorted(oomlab.items()):
        if len(by_round) < 2:
            continue
        out[tag] = against(by_round, torch_by_round, *ISSUE31_BARS.get(tag, (tag, None)))
        if tag in ISSUE54_BARS:
            best_twin, bar = ISSUE54_BARS[tag]
            out[tag]["against_best"] = against(by_round, torch_by_round, best_twin, bar)
            out[tag]["against_compile"] = against(by_round, torch_by_round, best_twin.replace("@best", "@compile"))
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
        for row in (r, r.get("against_best"), r.get("against_compile")):
            if row and (row is r or row["ratio"]["n"] or row["noisy_rounds"]):
                lines.append(_readme_row(tag, row))
    return lines + ["", f"A round whose p90/p10 exceeded {NOISY_SPREAD} on either side is noisy and left out "
                    "(its number in the pairs column, as + N noisy).", ""]


def _readme_row(tag, r):
    i = r["ratio"]
    noisy = f" + {len(r['noisy_rounds'])} noisy" if r.get("noisy_rounds") else ""
    return (f"| {tag} | {r['twin']} | {i['n']}{noisy} | {', '.join(_f(x, '.1f') for x in r['oomlab_ms'])} | "
            f"{', '.join(_f(x, '.1f') for x in r['torch_ms'])} | {_f(i['estimate'], '.3f')} | "
            f"{_f(i['lo'], '.3f')}-{_f(i['hi'], '.3f')}{'' if i['enough'] else ' (range)'} | "
            f"{_f(r.get('bar'), '.2f')} | {r.get('verdict', '—')} |")
