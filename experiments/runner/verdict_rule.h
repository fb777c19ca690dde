// verdict_rule.h — the one rule every experiment driver judges a claim by (docs/VERDICTS.md),
// stated once in the report (scripts/oomlab_report: VERDICT_RULE) and tested in
// tests/test_verdict_rule.cpp and, per driver, tests/test_verdicts.cpp.
//   * Timings: alternating repeated runs A, B, A, B, ... (at least kMinTimingPairs pairs):
//     the ratio A/B is the geometric mean of the per-pair ratios, with a 95% Student-t
//     interval on their logarithms (pairs cancel the drift of a shared, noisy machine).
//   * Accuracies: at least kMinSeeds seeds; mean and a 95% t interval; a difference of two
//     settings by Welch's interval on the difference of their means.
//   * A claim "the effect is above / below a threshold" is "holds" when the whole interval is
//     on the claimed side, "fails" when the whole interval is on the other side, and
//     "noise" otherwise or when there are too few runs to form an interval ("too few").
//   * Exact measurements (meta-device bytes, counts) carry no noise: an interval of width 0.
//   * A claim about a GPU with no GPU measurement is "pending GPU", never "holds".
// Statuses: the claim-level outcome maps to an experiment status by verdict_status():
// every sub-claim holds -> confirmed; every judged one fails -> refuted; holds and fails
// mixed -> depends; anything unjudged (noise, too few) -> inconclusive; GPU-only claims
// still open and the rest holding -> "pending GPU".
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace oomlab {

inline constexpr int kMinTimingPairs = 5;
inline constexpr int kMinSeeds = 3;

// An estimate with its 95% interval over n runs; `enough` is false when n is below the
// rule's minimum (then lo/hi are the observed range, or the estimate when n < 2).
struct Interval {
  double estimate = 0, lo = 0, hi = 0;
  int n = 0;
  bool enough = false;
};

// Two-sided 95% Student-t quantile for `df` degrees of freedom (df >= 1).
double t_quantile_975(double df);

// Per-pair ratio a[i]/b[i] of alternating timings; a and b of equal length, all positive.
Interval paired_ratio(const std::vector<double>& a, const std::vector<double>& b, int min_pairs = kMinTimingPairs);
// Mean of seeds' values with its t interval.
Interval seed_mean(const std::vector<double>& v, int min_seeds = kMinSeeds);
// Difference of means a - b (Welch); enough when each side has min_seeds values.
Interval mean_difference(const std::vector<double>& a, const std::vector<double>& b, int min_seeds = kMinSeeds);
// An exact value: no noise, interval of width 0.
Interval exact(double v);

enum class Judged { holds, fails, noise, too_few, pending_gpu };
const char* judged_name(Judged j);   // "holds", "fails", "inside the noise", "too few runs", "pending GPU"

// The claim "the quantity is above `threshold`" (above_is_claim) or below it.
Judged judge_threshold(const Interval& i, double threshold, bool above_is_claim);
// The claim "the quantity lies within [lo, hi]": holds when the interval is inside, fails
// when it is wholly outside, noise when it straddles a bound.
Judged judge_within(const Interval& i, double lo, double hi);
// An exact yes/no measurement.
inline Judged judge_exact(bool holds) { return holds ? Judged::holds : Judged::fails; }

// The experiment status for its sub-claims' outcomes (see above). Empty -> inconclusive.
std::string verdict_status(const std::vector<Judged>& parts);

// {"estimate", "lo", "hi", "n", "enough"} for a summary.
nlohmann::json interval_json(const Interval& i);
// The interval back from a summary (interval_json's format).
Interval interval_from_json(const nlohmann::json& j);
// "1.23x (95% CI 1.10-1.37, 5 pairs)"-style text: value scaled by `scale`, `unit` after it.
std::string interval_text(const Interval& i, const char* what_n, double scale = 1.0, const char* unit = "",
                          int decimals = 2);

}  // namespace oomlab
