// test_verdict_rule.cpp — the shared verdict rule (experiments/runner/verdict_rule.h): its
// intervals against values computed by hand, and its judgements on data where a claim holds,
// fails and sits inside the noise.
// ctest tier: unit
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/core/error.h"
#include "experiments/runner/verdict_rule.h"

namespace oomlab {
namespace {

TEST(VerdictRule, TQuantileMatchesTheTable) {
  EXPECT_NEAR(t_quantile_975(1), 12.706, 1e-3);
  EXPECT_NEAR(t_quantile_975(4), 2.776, 1e-3);
  EXPECT_NEAR(t_quantile_975(4.5), (2.776 + 2.571) / 2, 1e-3);   // Welch's fractional df
  EXPECT_NEAR(t_quantile_975(60), 2.000, 3e-3);
  EXPECT_NEAR(t_quantile_975(1e6), 1.960, 1e-3);
  EXPECT_THROW(t_quantile_975(0.5), ValueError);
}

TEST(VerdictRule, SeedMeanIntervalByHand) {
  // mean 2, sd 1, n 3: half width t(2) * 1/sqrt(3) = 4.303 / 1.732.
  const Interval i = seed_mean({1, 2, 3});
  EXPECT_TRUE(i.enough);
  EXPECT_EQ(i.n, 3);
  EXPECT_DOUBLE_EQ(i.estimate, 2.0);
  EXPECT_NEAR(i.hi - 2.0, 4.303 / std::sqrt(3.0), 1e-9);
  EXPECT_NEAR(2.0 - i.lo, 4.303 / std::sqrt(3.0), 1e-9);
  const Interval few = seed_mean({1, 3});
  EXPECT_FALSE(few.enough);
  EXPECT_EQ(few.lo, 1);
  EXPECT_EQ(few.hi, 3);
}

TEST(VerdictRule, PairedRatioIsTheGeometricMeanOfPairs) {
  // Pairs drift together (a noisy shared machine): the per-pair ratio is always 2.
  const Interval i = paired_ratio({2, 4, 6, 8, 10}, {1, 2, 3, 4, 5});
  EXPECT_TRUE(i.enough);
  EXPECT_NEAR(i.estimate, 2.0, 1e-12);
  EXPECT_NEAR(i.lo, 2.0, 1e-12);
  EXPECT_NEAR(i.hi, 2.0, 1e-12);
  EXPECT_FALSE(paired_ratio({2, 4, 6, 8}, {1, 2, 3, 4}).enough);   // 4 pairs < 5
  EXPECT_THROW(paired_ratio({1, 2}, {1}), ValueError);
  EXPECT_THROW(paired_ratio({1, 0}, {1, 1}), ValueError);
}

// The worked example tests/test_gpu_rounds.py holds the kit's Python copy of the rule to
// (scripts/gpu_rounds.py): logs -2d .. 2d, so s = d sqrt(2.5), half width t(4) s / sqrt(5).
TEST(VerdictRule, PairedRatioWorkedExampleSharedWithTheKit) {
  const double d = 0.01, half = 2.776 * d * std::sqrt(2.5) / std::sqrt(5.0);
  std::vector<double> a;
  for (int k = -2; k <= 2; ++k) a.push_back(100 * std::exp(k * d));
  const Interval i = paired_ratio(a, {100, 100, 100, 100, 100});
  EXPECT_NEAR(i.estimate, 1.0, 1e-12);
  EXPECT_NEAR(i.lo, std::exp(-half), 1e-12);
  EXPECT_NEAR(i.hi, std::exp(half), 1e-12);
}

TEST(VerdictRule, WelchDifferenceByHand) {
  // a: mean 10, var 1 (n 3); b: mean 7, var 1 (n 3): se sqrt(2/3), df 4.
  const Interval d = mean_difference({9, 10, 11}, {6, 7, 8});
  EXPECT_TRUE(d.enough);
  EXPECT_DOUBLE_EQ(d.estimate, 3.0);
  EXPECT_NEAR(d.hi - 3.0, 2.776 * std::sqrt(2.0 / 3.0), 1e-9);
  const Interval same = mean_difference({5, 5, 5}, {5, 5, 5});
  EXPECT_EQ(same.lo, 0);
  EXPECT_EQ(same.hi, 0);
  EXPECT_FALSE(mean_difference({1}, {2, 3, 4}).enough);
}

TEST(VerdictRule, ThresholdJudgementHoldsFailsNoise) {
  const Interval faster = paired_ratio({1.30, 1.32, 1.29, 1.31, 1.30}, {1, 1, 1, 1, 1});   // 30% slower, tight
  EXPECT_EQ(judge_threshold(faster, 1.0, true), Judged::holds);
  EXPECT_EQ(judge_threshold(faster, 1.0, false), Judged::fails);
  const Interval noisy = paired_ratio({1.3, 0.7, 1.4, 0.8, 1.0}, {1, 1, 1, 1, 1});        // +-40%: no signal
  EXPECT_EQ(judge_threshold(noisy, 1.0, true), Judged::noise);
  EXPECT_EQ(judge_threshold(paired_ratio({1.3}, {1.0}), 1.0, true), Judged::too_few);
  EXPECT_EQ(judge_threshold(exact(5), 4, true), Judged::holds);
  EXPECT_EQ(judge_threshold(exact(4), 4, true), Judged::fails);   // exact and on the threshold: not above
}

TEST(VerdictRule, WithinJudgement) {
  EXPECT_EQ(judge_within(mean_difference({80.1, 80.3, 80.2}, {80.0, 80.2, 80.1}), -1, 1), Judged::holds);
  EXPECT_EQ(judge_within(mean_difference({85.1, 85.3, 85.2}, {80.0, 80.2, 80.1}), -1, 1), Judged::fails);
  EXPECT_EQ(judge_within(mean_difference({79, 82, 80.5}, {80.0, 80.2, 80.1}), -1, 1), Judged::noise);
}

TEST(VerdictRule, StatusFromParts) {
  using J = Judged;
  EXPECT_EQ(verdict_status({}), "inconclusive");
  EXPECT_EQ(verdict_status({J::holds, J::holds}), "confirmed");
  EXPECT_EQ(verdict_status({J::fails, J::fails}), "refuted");
  EXPECT_EQ(verdict_status({J::fails, J::noise}), "refuted");
  EXPECT_EQ(verdict_status({J::holds, J::fails}), "depends");
  EXPECT_EQ(verdict_status({J::holds, J::noise}), "inconclusive");
  EXPECT_EQ(verdict_status({J::holds, J::too_few}), "inconclusive");
  EXPECT_EQ(verdict_status({J::holds, J::pending_gpu}), "pending GPU");
  EXPECT_EQ(verdict_status({J::pending_gpu, J::noise}), "inconclusive");
}

TEST(VerdictRule, IntervalRoundTripsThroughJson) {
  const Interval i = seed_mean({1, 2, 4});
  const Interval j = interval_from_json(interval_json(i));
  EXPECT_EQ(i.estimate, j.estimate);
  EXPECT_EQ(i.lo, j.lo);
  EXPECT_EQ(i.n, j.n);
  EXPECT_EQ(i.enough, j.enough);
  EXPECT_NE(interval_text(i, "seeds", 100, "%").find("95% CI"), std::string::npos);
}

}  // namespace
}  // namespace oomlab
