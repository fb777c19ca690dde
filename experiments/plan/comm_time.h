// comm_time.h — the time of DistributedDataParallel's gradient all-reduce on a card's peer
// link, for the planner: NCCL's ring over n ranks moves 2(n-1)/n x S bytes through each
// rank's link for an S-byte bucket (engine/parallel/cost_model.h; nccl-tests' "bus
// bandwidth" is defined by the same factor, its doc/PERFORMANCE.md), here at the link's
// datasheet rate per direction (gpu_table.h link_gbps).
// Contracts:
//  * A lower bound on each bucket's time: measured bus bandwidth stays below the link's
//    rate, and there is no latency term (no multi-GPU record to fit one from). 0 ranks or
//    one rank: no communication. An unknown link (link_gbps 0): total_ms < 0.
//  * last_bucket_ms: the bucket launched last (the first layers' gradients), which backward
//    cannot hide: whatever DDP overlaps, the step waits at least this long after backward.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/plan/gpu_table.h"

namespace oomlab {

struct CommTime {
  int ranks = 1;
  double total_ms = 0;        // every bucket's all-reduce (DataParallel: every copy), one after another
  double last_bucket_ms = 0;
  std::string link;           // the link and its rate, as printed
  std::string model;          // what was counted, as printed
  nlohmann::json to_json() const;
};

// zero_stage 3 moves 1.5 times the bytes (parameters all-gathered for forward and again for
// backward, gradients reduce-scattered: the ZeRO paper's 3 Psi); stages 1 and 2 as DDP's.
CommTime ddp_comm_time(const std::vector<int64_t>& bucket_bytes, int ranks, const GpuSpec& g, int zero_stage = 0);

// DataParallel's copies through device 0's link in one step (data_parallel.h), one after
// another as oomlab's DataParallel makes them: replicate (parameters and buffers to each of
// the other devices), scatter (their chunks of the input) and the reduction (each other
// device's gradients to device 0). The gathered outputs and their gradients are left out
// (small for the zoo's classifiers). Same rate and bound as ddp_comm_time; last_bucket_ms is
// the reduction (it ends backward).
struct DpCopyBytes {
  int64_t params_and_buffers = 0, grads = 0, input = 0;
  std::vector<int64_t> chunks;   // samples per device
};
CommTime dp_comm_time(const DpCopyBytes& b, const GpuSpec& g);

}  // namespace oomlab
