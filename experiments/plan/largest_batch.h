// largest_batch.h — `oomlab estimate --device-memory SIZE`'s answer to "what batch fits?":
// the largest batch whose steady-state training step (estimate_memory: the second step, the
// optimizer state allocated) runs on the meta device capped at SIZE without an out-of-memory
// error, as a real card of that size would raise it (the caching allocator's reserved
// segments must fit, memory_report.h). Batches 1 and 8 give a linear guess of where the
// reserved peak meets the capacity; galloping from the guess brackets the answer and
// bisection finds it (a handful of exact meta steps when the peak is near-linear in the
// batch, O(2 log2 B) at worst). Near the edge "fits" is not monotone in the batch (block
// rounding: the imported vgg16 with --checkpoint sqrt fits 24 GiB at 321 and 323, not 322):
// the answer is a batch that fits whose successor does not, not always the largest such.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "experiments/plan/memory_report.h"

namespace oomlab {

inline constexpr int64_t kLargestBatchSearchCap = int64_t(1) << 20;

struct LargestBatch {
  uint64_t capacity = 0;
  int64_t batch = 0;            // 0: not even one sample fits
  bool at_search_cap = false;   // kLargestBatchSearchCap fits (the answer is at least that)
  int64_t peak_reserved_bytes = 0, peak_allocated_bytes = 0;   // of `batch`'s step
  int64_t probes = 0;
  nlohmann::json to_json() const;
};

LargestBatch largest_batch_under(const RunSpec& spec, const std::string& optimizer, uint64_t capacity);

}  // namespace oomlab
