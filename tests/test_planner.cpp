// test_planner.cpp — `oomlab plan`'s search (experiments/plan/planner.h): every fitting
// candidate's micro-batch is the largest divisor of the batch whose exact meta peak fits
// (the next one does not), the recommended one has the smallest compute bound, the bound
// is the counted FLOPs over the card's peak, a card too small gets no recommendation but
// the smallest need, and the GPU table answers names. With a time model, each candidate's
// time is the model's prediction for its meta step x accumulate, the recommendation the
// fastest, and every technique it did not take has a reason (a faster one's names the
// uncalibrated term that kept it out). Without accumulation (plan --batch) the whole batch
// fits or the candidate is out.
// ctest tier: models
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "experiments/plan/memory_report.h"
#include "experiments/plan/planner.h"

using namespace oomlab;

namespace {
PlanRequest small_request(uint64_t memory) {
  PlanRequest r;
  r.model = RunSpec::for_model("resnet20");
  r.gpu = find_gpu("rtx4090");
  r.gpu.memory_bytes = memory;
  r.reserve_bytes = 0;
  r.global_batch = 64;
  return r;
}

RunSpec spec_of(const PlanRequest& r, const PlanCandidate& c) {
  RunSpec s = r.model;
  s.amp = c.precision == "bf16" ? std::optional<DType>(DType::bf16)
          : c.precision == "fp16" ? std::optional<DType>(DType::f16) : std::nullopt;
  s.half = s.master_weights = c.precision == "half";
  const bool scaled = c.precision == "fp16" || c.precision == "half";
  s.loss_scale = parse_loss_scale(scaled ? "dynamic" : "none", scaled);
  s.checkpoint = parse_checkpoint_policy(c.checkpoint);
  s.channels_last = c.channels_last;
  if (c.fuse_relu) s.arch.fuse_relu = "on";
  return s;
}
}  // namespace

TEST(Planner, EachFitIsTheLargestDivisorThatFits) {
  const PlanRequest r = small_request(uint64_t(40) << 20);   // 40 MiB: some micro-batches do not fit
  const Plan p = make_plan(r);
  ASSERT_FALSE(p.candidates.empty());
  int fitting = 0;
  for (const PlanCandidate& c : p.candidates) {
    SCOPED_TRACE(c.precision + " " + c.checkpoint);
    if (c.micro_batch == 0) continue;
    ++fitting;
    EXPECT_EQ(64 % c.micro_batch, 0);
    EXPECT_EQ(c.micro_batch * c.accumulate, 64);
    EXPECT_LE(uint64_t(c.peak_reserved_bytes), r.gpu.memory_bytes);
    int64_t next = c.micro_batch * 2;   // the next divisor of 64
    if (next <= 64) {
      EXPECT_GT(uint64_t(estimate_memory(spec_of(r, c), next, r.optimizer).peak_reserved_bytes), r.gpu.memory_bytes);
    }
  }
  EXPECT_GT(fitting, 0);
  ASSERT_TRUE(p.recommended.has_value());
  for (const PlanCandidate& c : p.candidates) {
    if (c.micro_batch > 0) {
      EXPECT_LE(p.candidates[*p.recommended].compute_bound_ms, c.compute_bound_ms);
    }
  }
}

// plan --batch (accumulate false): the whole per-rank batch or nothing. At 40 MiB some
// candidates fit 64 samples only by accumulating: those are out, with the batch in the reason;
// the others train it in one micro-step, at the peak of that step.
TEST(Planner, WithoutAccumulationTheWholeBatchFitsOrTheCandidateIsOut) {
  const PlanRequest with = small_request(uint64_t(40) << 20);
  PlanRequest without = with;
  without.accumulate = false;
  const Plan a = make_plan(with), b = make_plan(without);
  ASSERT_EQ(a.candidates.size(), b.candidates.size());
  int out = 0, whole = 0;
  for (size_t i = 0; i < b.candidates.size(); ++i) {
    const PlanCandidate& c = b.candidates[i];
    SCOPED_TRACE(c.techniques());
    ASSERT_EQ(c.techniques(), a.candidates[i].techniques());
    if (c.micro_batch == 0) {
      ++out;
      EXPECT_LT(a.candidates[i].micro_batch, 64);
      if (a.candidates[i].micro_batch > 0) {   // fits by accumulating, so was measured: at 64
        EXPECT_NE(c.why_not.find("at micro-batch 64"), std::string::npos) << c.why_not;
      }
      continue;
    }
    ++whole;
    EXPECT_EQ(c.micro_batch, 64);
    EXPECT_EQ(c.accumulate, 1);
    EXPECT_EQ(a.candidates[i].micro_batch, 64);
    EXPECT_EQ(c.peak_reserved_bytes, a.candidates[i].peak_reserved_bytes);
    EXPECT_EQ(uint64_t(c.peak_reserved_bytes),
              uint64_t(estimate_memory(spec_of(with, c), 64, with.optimizer).peak_reserved_bytes));
  }
  EXPECT_GT(out, 0);
  EXPECT_GT(whole, 0);
}

TEST(Planner, WithATimeModelTheFastestPredictedCandidateIsRecommended) {
  TimeModel m;   // a planted model: convolutions cost their peak time, every launch 5 us
  m.coefficients = {{"conv.fp32", 1}, {"conv.tf32", 1}, {"conv.16", 1}, {"launches", 5}, {"bytes", 1}};
  PlanRequest r = small_request(uint64_t(1) << 30);
  r.time_model = &m;
  const Plan p = make_plan(r);
  ASSERT_TRUE(p.recommended.has_value());
  bool layouts = false, fused = false;
  for (const PlanCandidate& c : p.candidates) {
    layouts |= c.channels_last;
    fused |= c.fuse_relu;
    if (c.micro_batch == 0) continue;
    const Tf32Use tf32 = parse_tf32_use(c.precision == "fp32" ? "none" : c.precision == "tf32" ? "all" : "cudnn");
    const MemoryEstimate e = estimate_memory(spec_of(r, c), c.micro_batch, r.optimizer);
    const double ms = m.predict_ms(time_features(e, r.gpu, tf32));
    EXPECT_NEAR(c.predicted_ms, ms * double(c.accumulate), 1e-9 * ms * double(c.accumulate)) << c.techniques();
    EXPECT_LE(p.candidates[*p.recommended].predicted_ms, c.predicted_ms) << c.techniques();
  }
  EXPECT_TRUE(layouts && fused);   // resnet20 takes channels-last and fuse-relu: both searched
  ASSERT_FALSE(p.technique_reasons.empty());
  for (const char* dim : {"precision ", "checkpoint ", "channels-last ", "fuse-relu "}) {
    bool named = false;
    for (const std::string& why : p.technique_reasons) named |= why.rfind(dim, 0) == 0;
    EXPECT_TRUE(named) << dim;
  }
}

// A candidate predicted faster than the recommendation lost only because a term of its
// time was never calibrated (here: every precision but fp32); its reason says so.
TEST(Planner, AFasterButExtrapolatedCandidateSaysWhyItLost) {
  TimeModel m;
  m.coefficients = {{"conv.fp32", 1}, {"conv.tf32", 1}, {"conv.16", 1}, {"launches", 5}, {"bytes", 1}};
  for (const std::string& f : time_feature_names()) m.seen[f] = 1;   // every term measured...
  m.precisions = {"fp32"};                                          // ...but in fp32 alone
  PlanRequest r = small_request(uint64_t(1) << 30);
  r.time_model = &m;
  const Plan p = make_plan(r);
  ASSERT_TRUE(p.recommended.has_value());
  const PlanCandidate& best = p.candidates[*p.recommended];
  EXPECT_EQ(best.precision, "fp32");
  int faster = 0;
  for (const PlanCandidate& c : p.candidates)
    faster += c.micro_batch > 0 && c.time_ms() < best.time_ms();
  ASSERT_GT(faster, 0) << "the planted model makes 16-bit convolutions faster";
  int explained = 0;
  for (const std::string& why : p.technique_reasons) {
    if (why.find("faster, but extrapolated: precision ") == std::string::npos) continue;
    ++explained;
    EXPECT_NE(why.find("(no calibration pair ran it)"), std::string::npos) << why;
    EXPECT_EQ(why.rfind("precision ", 0), 0u) << why;
  }
  EXPECT_GT(explained, 0);
}

TEST(Planner, TheBoundIsTheCountedFlopsOverThePeak) {
  const PlanRequest r = small_request(uint64_t(1) << 30);
  const Plan p = make_plan(r);
  for (const PlanCandidate& c : p.candidates) {
    if (c.micro_batch == 0 || c.precision != "bf16") continue;
    const MemoryEstimate e = estimate_memory(spec_of(r, c), c.micro_batch, r.optimizer);
    double ms = 0;
    for (const auto& [dtype, flops] : e.step_flops) ms += flops / (r.gpu.peak_tflops(parse_dtype(dtype), false) * 1e9);
    EXPECT_NEAR(c.compute_bound_ms, ms * double(c.accumulate), 1e-9 * ms * double(c.accumulate)) << c.checkpoint;
  }
}

TEST(Planner, ACardTooSmallGetsTheSmallestNeedNotARecommendation) {
  const Plan p = make_plan(small_request(uint64_t(1) << 20));   // 1 MiB
  EXPECT_FALSE(p.recommended.has_value());
  EXPECT_TRUE(p.frontier.empty());
  EXPECT_GT(p.smallest_peak_bytes, int64_t(1) << 20);
  for (const PlanCandidate& c : p.candidates) EXPECT_NE(c.why_not.find("does not fit"), std::string::npos);
  EXPECT_FALSE(cards_that_hold(p.smallest_peak_bytes, 0).empty());
}

TEST(Planner, GpuTableNamesItsCards) {
  EXPECT_EQ(find_gpu("h100-sxm").memory_bytes, 85017493504u);   // measured (reports/results/gpu)
  EXPECT_TRUE(find_gpu("h100-sxm").measured);
  EXPECT_EQ(find_gpu("t4").bf16_tflops, 0);   // Turing: no bf16 tensor cores
  try {
    find_gpu("h999");
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("rtx4090"), std::string::npos) << e.what();
  }
  PlanRequest r = small_request(uint64_t(1) << 30);
  r.gpus = 3;
  EXPECT_THROW(make_plan(r), ValueError);   // 64 samples do not split over 3 ranks
}
