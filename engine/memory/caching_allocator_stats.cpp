// caching_allocator_stats.cpp — the caching allocator's read side: PyTorch-named stats,
// peaks and windows, the trace, segment snapshots; and MemoryContext's thread-local label.
// Every method takes the allocator's one mutex (caching_allocator.cpp's contract 4).
#include <algorithm>

#include "engine/memory/caching_allocator_impl.h"

namespace oomlab {
namespace alloc_detail {
namespace {
thread_local std::string t_frame;  // MemoryContext::current()
}  // namespace
std::string& current_frame() { return t_frame; }
}  // namespace alloc_detail

using namespace alloc_detail;

std::map<std::string, int64_t> CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::map<std::string, int64_t> out;
  for (int k = 0; k < kNumKinds; ++k)
    for (int p = 0; p < 3; ++p) {
      const std::string prefix = std::string(kKindNames[k]) + "." + kPoolNames[p] + ".";
      const Stat& s = impl_->st[k][p];
      out[prefix + "current"] = s.current;
      out[prefix + "peak"] = s.peak;
      out[prefix + "allocated"] = s.allocated;
      out[prefix + "freed"] = s.freed;
    }
  out["num_alloc_retries"] = impl_->num_alloc_retries;
  out["num_ooms"] = impl_->num_ooms;
  out["num_device_alloc"] = impl_->num_device_alloc;
  out["num_device_free"] = impl_->num_device_free;
  out["num_invalid_frees"] = impl_->num_invalid_frees;
  out["num_graph_pools"] = int64_t(impl_->live_graph_pools.size());
  out["graph_pools_reserved_bytes"] = impl_->graph_pools_reserved_bytes();
  return out;
}

int64_t CachingAllocator::stat(const std::string& key) const {
  auto all = stats();
  auto it = all.find(key);
  OOMLAB_CHECK(it != all.end(), "unknown allocator stat '", key,
               "' (expected e.g. allocated_bytes.all.peak or num_ooms)");
  return it->second;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& row : impl_->st)
    for (auto& s : row) s.peak = s.current;
}

void CachingAllocator::reset_window_peaks() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& row : impl_->st)
    for (auto& s : row) s.window_peak = s.current;
}

int64_t CachingAllocator::window_peak(const std::string& stat) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (int k = 0; k < kNumKinds; ++k)
    for (int p = 0; p < 3; ++p)
      if (stat == std::string(kKindNames[k]) + "." + kPoolNames[p]) return impl_->st[k][p].window_peak;
  throw ValueError(str_cat("unknown allocator stat '", stat, "' (expected e.g. allocated_bytes.all)"));
}

void CachingAllocator::reset_accumulated_stats() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& row : impl_->st)
    for (auto& s : row) s.allocated = s.freed = 0;
  impl_->num_alloc_retries = impl_->num_ooms = impl_->num_device_alloc = impl_->num_device_free = 0;
}

void CachingAllocator::record_history(bool enabled, size_t max_entries) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->recording = enabled;
  impl_->max_entries = std::max<size_t>(max_entries, 1);
  while (impl_->events.size() > impl_->max_entries) impl_->events.pop_front();
}

bool CachingAllocator::recording_history() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->recording;
}

std::vector<TraceEvent> CachingAllocator::trace() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return {impl_->events.begin(), impl_->events.end()};
}

void CachingAllocator::clear_trace() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->events.clear();
}

std::vector<SegmentInfo> CachingAllocator::segments() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<SegmentInfo> out;
  out.reserve(impl_->segments.size());
  for (const auto& [id, seg] : impl_->segments) {
    SegmentInfo info{reinterpret_cast<uint64_t>(seg->base), seg->size, seg->small, {}, seg->pool};
    for (const Block* b = seg->head; b != nullptr; b = b->next)
      info.blocks.push_back(BlockInfo{addr_of(b), b->size, b->requested, b->allocated, b->frame});
    out.push_back(std::move(info));
  }
  return out;
}

MemoryContext::MemoryContext(const std::string& layer, const char* phase) : saved_(t_frame) {
  t_frame = layer + "/" + (phase != nullptr ? phase : "");
}
MemoryContext::~MemoryContext() { t_frame.swap(saved_); }
std::string MemoryContext::current() { return t_frame; }

}  // namespace oomlab
