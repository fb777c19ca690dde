// plan_fit.h — the planner's search pieces (planner.cpp's, not a public interface): the
// precisions a card searches, one candidate's technique choices and run spec, its fit (the
// largest micro-batch whose exact meta peak holds on the card: fit_micro_batch, and balanced
// DataParallel's device-0 share: fit_balanced_dp) and its times (time_candidate). The
// contracts are planner.h's.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "experiments/plan/memory_report.h"
#include "experiments/plan/planner.h"

namespace oomlab {

struct Precision {
  const char* name;
  std::optional<DType> amp;
  const char* allow_tf32;   // the run's --allow-tf32
  bool half = false;        // model.half() with float32 master weights (--half --master-weights)
};
std::vector<Precision> precisions(const GpuSpec& g);
Precision precision_named(const GpuSpec& g, const std::string& name);   // ValueError when the card has none

// The technique choices one candidate makes besides precision and checkpointing.
struct Choice {
  std::string attention;   // "" when the model has no attention use
  bool channels_last = false, fuse_relu = false;
  int zero = 0;            // ZeRO stage (several GPUs)
  ParallelMode parallel = ParallelMode::none;   // several GPUs: ddp, dp or bdp (ZeRO-Offload: ddp)
  ZeroOffload offload = ZeroOffload::none;
};

uint64_t usable_bytes(const PlanRequest& r);
RunSpec candidate_spec(const PlanRequest& r, const Precision& p, const std::string& policy, const Choice& ch);
// The static bytes' key (Plan::static_bytes): precision and sharding.
std::string static_key(const std::string& precision, const Choice& ch);
// c's fit at s: micro_batch (0: micro-batch 1 does not fit, why_not says so), peak, times.
void fit_micro_batch(const PlanRequest& r, const RunSpec& s, const Precision& p, PlanCandidate& c, Plan& plan);
// Balanced DataParallel with the techniques of `from` (the fastest DataParallel candidate):
// the largest share (a divisor of the per-rank batch, from `from`'s own up) that some
// device-0 share lets fit.
PlanCandidate fit_balanced_dp(const PlanRequest& r, const PlanCandidate& from, Plan& plan);

}  // namespace oomlab
