// largest_batch.cpp — the largest batch under a device capacity (largest_batch.h).
#include "experiments/plan/largest_batch.h"

#include <algorithm>
#include <optional>

#include "engine/core/error.h"

namespace oomlab {

namespace {
// The step's estimate at `batch` under `capacity`, or nullopt when it runs out of memory.
std::optional<MemoryEstimate> fits(const RunSpec& spec, const std::string& opt, uint64_t capacity, int64_t batch,
                                   int64_t& probes) {
  ++probes;
  try {
    return estimate_memory(spec, batch, opt, capacity);
  } catch (const OutOfMemoryError&) {
    return std::nullopt;
  }
}
}  // namespace

nlohmann::json LargestBatch::to_json() const {
  return {{"capacity_bytes", capacity}, {"batch", batch}, {"at_search_cap", at_search_cap},
          {"peak_reserved_bytes", peak_reserved_bytes}, {"peak_allocated_bytes", peak_allocated_bytes},
          {"probes", probes}};
}

// Where the peak reserved bytes of batches a < b put the capacity (linear in the batch).
int64_t predicted(const MemoryEstimate& a, const MemoryEstimate& b, uint64_t capacity) {
  const double slope = double(b.peak_reserved_bytes - a.peak_reserved_bytes) / double(b.batch - a.batch);
  if (slope <= 0) return kLargestBatchSearchCap;
  const double guess = double(a.batch) + (double(capacity) - double(a.peak_reserved_bytes)) / slope;
  return std::clamp<int64_t>(int64_t(guess), 1, kLargestBatchSearchCap);
}

LargestBatch largest_batch_under(const RunSpec& spec, const std::string& optimizer, uint64_t capacity) {
  LargestBatch r;
  r.capacity = capacity;
  std::optional<MemoryEstimate> best = fits(spec, optimizer, capacity, 1, r.probes);
  if (!best) return r;
  int64_t lo = 1, hi = 0;   // lo fits; hi (when > 0) does not
  // a linear guess from batches 1 and 8, then galloping from it to bracket the answer
  std::optional<MemoryEstimate> eight = fits(spec, optimizer, capacity, 8, r.probes);
  int64_t probe = eight ? predicted(*best, *eight, capacity) : 2;
  if (eight) best = eight, lo = 8;
  for (int64_t step = 1; hi == 0 && lo < kLargestBatchSearchCap; step *= 2) {
    probe = std::min(std::max(probe, lo + 1), kLargestBatchSearchCap);
    if (std::optional<MemoryEstimate> e = fits(spec, optimizer, capacity, probe, r.probes)) best = e, lo = probe;
    else hi = probe;
    probe = lo + step;
  }
  r.at_search_cap = hi == 0;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (std::optional<MemoryEstimate> e = fits(spec, optimizer, capacity, mid, r.probes)) best = e, lo = mid;
    else hi = mid;
  }
  r.batch = lo;
  r.peak_reserved_bytes = best->peak_reserved_bytes;
  r.peak_allocated_bytes = best->peak_allocated_bytes;
  return r;
}

}  // namespace oomlab
