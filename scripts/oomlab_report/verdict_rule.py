"""verdict_rule.py — the verdict statuses a results file may carry and the verdict rule as
REPORT.md states it, once (make_report.py puts it near the top of the report).

The rule itself is applied in C++, by experiments/runner/verdict_rule.h (docs/VERDICTS.md):
RULE_TEXT describes that code and must change with it (the statuses here are the ones its
verdict_status() returns). paired_ratio is the rule's timing interval in Python (verdict_rule.cpp's
paired_ratio, the same t table), for the records judged outside the C++ runner: the GPU kit's
repeated pairs (gpu_rounds.py) and benchmark files shown in the report. Standard library only.
"""
import math

# The experiment-level statuses, as verdict_status() in experiments/runner/verdict_rule.h
# writes them. "pending GPU" holds a space: it is shown as text (bold in the index and the
# section's verdict heading), never used as an anchor or a file name.
VERDICTS = ("confirmed", "refuted", "depends", "inconclusive", "pending GPU")

# Describes experiments/runner/verdict_rule.h, which is the code that applies the rule.
RULE_TEXT = (
    "Every verdict follows one rule. Timings come from alternating repeated runs (A, B, A, B, ...; "
    "at least 5 pairs): the ratio is the geometric mean of the per-pair ratios with a 95% Student-t "
    "interval. Accuracies come from at least 3 seeds: mean with a 95% t interval; differences by "
    "Welch's interval. A claim is confirmed or refuted only when the whole interval clears the claim's "
    "threshold (taken from the source's own figures where it gives them, and said so); otherwise it is "
    "inconclusive. Exact measurements (the meta device's bytes, counts) carry no noise. A claim about "
    "GPUs with no GPU measurement is 'pending GPU', never confirmed. An experiment is 'depends' when "
    "some sub-claims hold and some fail, refuted when some fail and none holds; with no failure it is "
    "inconclusive when any sub-claim is inside the noise or has too few runs, 'pending GPU' when the "
    "rest hold and a GPU claim is open, and confirmed when every sub-claim holds."
)


def rule_paragraph(exceptions_path):
    """The report's "How verdicts are judged" paragraph; exceptions_path is where the
    provenance exceptions file is shown (e.g. reports/provenance_exceptions.json)."""
    return (f"**How verdicts are judged.** {RULE_TEXT} Results committed before the rule keep the "
            f"verdicts of their own commit (the index's git column) until they are rerun; those whose "
            f"rerun from a clean commit is still pending are listed in `{exceptions_path}`.\n")


MIN_PAIRS = 5   # verdict_rule.h's kMinTimingPairs
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,   # verdict_rule.cpp's table
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t_quantile_975(df):
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df >= 30:
        return 1.96 + 2.46 / df
    lo = int(math.floor(df))
    return T975[lo - 1] + (df - lo) * (T975[min(lo, 29)] - T975[lo - 1])


def paired_ratio(a, b, min_pairs=MIN_PAIRS):
    """verdict_rule.cpp's paired_ratio: {estimate, lo, hi, n, enough} of a[i] / b[i]."""
    logs = [math.log(x / y) for x, y in zip(a, b)]
    n = len(logs)
    if n == 0:
        return {"estimate": None, "lo": None, "hi": None, "n": 0, "enough": False}
    mean = sum(logs) / n
    enough = n >= min_pairs and n >= 2
    if n < 2:
        lo = hi = mean
    elif not enough:
        lo, hi = min(logs), max(logs)
    else:
        half = t_quantile_975(n - 1) * math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1) / n)
        lo, hi = mean - half, mean + half
    return {"estimate": math.exp(mean), "lo": math.exp(lo), "hi": math.exp(hi), "n": n, "enough": enough}
