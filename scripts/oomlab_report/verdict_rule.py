"""verdict_rule.py — the verdict statuses a results file may carry and the verdict rule as
REPORT.md states it, once (make_report.py puts it near the top of the report).

The rule itself is applied in C++, by experiments/runner/verdict_rule.h (DESIGN.md section 11):
RULE_TEXT describes that code and must change with it (the statuses here are the ones its
verdict_status() returns). Standard library only.
"""

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
