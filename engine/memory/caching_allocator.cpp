// caching_allocator.cpp — the per-device caching allocator (policy: caching_allocator.h).
// Contracts kept here: (1) every decision (best fit, split, merge, release) depends only
// on sizes and creation order — free pools compare (size, segment id, offset), never raw
// addresses — so meta replays cpu/cuda exactly; (2) stats follow PyTorch's accounting
// (allocated_bytes counts the rounded block, requested_bytes the caller's size,
// inactive_split the free blocks of split segments, applied as one net change per op);
// (3) an OOM leaves every structure consistent; (4) one mutex, no public method calls
// another while holding it. Trace "oom" events carry the free-byte estimate in addr
// (PyTorch's device_free). Trace times share the process-wide trace_clock_us() origin.
#include "engine/memory/caching_allocator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <unordered_map>

#include "engine/core/error.h"

namespace oomlab {

int64_t trace_clock_us() {  // declared in memory_export.h; shared with OpSpanScope
  static const auto origin = std::chrono::steady_clock::now();
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now() - origin).count();
}

namespace {

enum StatKind { kAllocation, kSegment, kActive, kInactiveSplit, kAllocatedBytes, kReservedBytes,
                kActiveBytes, kInactiveSplitBytes, kRequestedBytes, kWorkspaceBytes, kNumKinds };
const char* const kKindNames[kNumKinds] = {
    "allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
    "active_bytes", "inactive_split_bytes", "requested_bytes", "workspace_bytes"};
const char* const kPoolNames[3] = {"all", "small_pool", "large_pool"};

// current and peak stay below kMaxAccountedBytes (new_segment); the lifetime totals
// saturate at INT64_MAX rather than wrap.
struct Stat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  int64_t window_peak = 0;   // the peak since reset_window_peaks (never reported in stats())
  static void saturating_add(int64_t& total, int64_t n) {
    if (__builtin_add_overflow(total, n, &total)) total = INT64_MAX;
  }
  void increase(int64_t n) {
    current += n;
    peak = std::max(peak, current);
    window_peak = std::max(window_peak, current);
    saturating_add(allocated, n);
  }
  void decrease(int64_t n) { current -= n; saturating_add(freed, n); OOMLAB_ASSERT(current >= 0); }
};

// The most a device may reserve in all (4 EiB): beyond it sums of byte counts could wrap,
// so a larger request is an out-of-memory error even where capacity is unlimited (meta).
constexpr uint64_t kMaxAccountedBytes = uint64_t(1) << 62;

struct Segment;
struct Block {
  Segment* seg = nullptr;
  uint64_t seg_id = 0;      // copy of seg->id for the pool ordering
  size_t offset = 0, size = 0, requested = 0;
  bool allocated = false, workspace = false;
  Block* prev = nullptr;    // neighbours inside the same segment
  Block* next = nullptr;
  std::string frame;
  bool is_split() const { return prev != nullptr || next != nullptr; }
};
struct Segment { uint64_t id = 0; void* base = nullptr; size_t size = 0; bool small = false;
                 Block* head = nullptr; };

uint64_t addr_of(const Block* b) { return reinterpret_cast<uint64_t>(b->seg->base) + b->offset; }

struct BlockLess {  // best fit: smallest size, then oldest segment, then lowest offset
  bool operator()(const Block* a, const Block* b) const {
    if (a->size != b->size) return a->size < b->size;
    if (a->seg_id != b->seg_id) return a->seg_id < b->seg_id;
    return a->offset < b->offset;
  }
};
using Pool = std::set<Block*, BlockLess>;

size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
size_t round_size(size_t n) { return n < kMinBlockSize ? kMinBlockSize : round_up(n, kMinBlockSize); }
size_t segment_size_for(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return round_up(size, kRoundLarge);
}

std::string format_size(uint64_t bytes) {  // PyTorch-style: B / KiB / MiB / GiB
  char buf[64];
  if (bytes < 1024) std::snprintf(buf, sizeof buf, "%llu bytes", (unsigned long long)bytes);
  else if (bytes < (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f KiB", bytes / 1024.0);
  else if (bytes < (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / 1048576.0);
  else std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / 1073741824.0);
  return buf;
}

thread_local std::string t_frame;  // MemoryContext::current()

}  // namespace

struct CachingAllocator::Impl {
  Device device;
  std::unique_ptr<RawMemory> raw;
  mutable std::mutex mu;
  Pool small_free, large_free;
  std::unordered_map<uint64_t, Block*> active;   // address -> allocated block
  std::map<uint64_t, Segment*> segments;         // id (creation order) -> segment
  uint64_t next_segment_id = 1;
  Stat st[kNumKinds][3];
  int64_t num_alloc_retries = 0, num_ooms = 0, num_device_alloc = 0, num_device_free = 0;
  int64_t num_invalid_frees = 0;   // frees of pointers allocate() never returned (a bug)
  size_t capacity = 0;
  bool recording = false;
  size_t max_entries = 1 << 20;
  std::deque<TraceEvent> events;

  const bool no_caching = [] {   // OOMLAB_NO_CACHING=1: one exact segment per block (header)
    const char* v = std::getenv("OOMLAB_NO_CACHING");
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
  }();

  Impl(Device d, std::unique_ptr<RawMemory> r) : device(d), raw(std::move(r)) {}
  ~Impl() { for (auto& [id, seg] : segments) release_raw(seg); }

  Pool& pool_of(bool small) { return small ? small_free : large_free; }
  void inc(StatKind k, bool small, int64_t n) { st[k][0].increase(n); st[k][small ? 1 : 2].increase(n); }
  void dec(StatKind k, bool small, int64_t n) { st[k][0].decrease(n); st[k][small ? 1 : 2].decrease(n); }
  // Net change of the inactive_split stats over one operation (PyTorch applies the net).
  void apply_split_delta(bool small, int64_t d_count, int64_t d_bytes) {
    if (d_count > 0) inc(kInactiveSplit, small, d_count);
    if (d_count < 0) dec(kInactiveSplit, small, -d_count);
    if (d_bytes > 0) inc(kInactiveSplitBytes, small, d_bytes);
    if (d_bytes < 0) dec(kInactiveSplitBytes, small, -d_bytes);
  }
  // Per-request stats of one allocated block: up on allocate, down on free.
  void account(const Block* b, bool small, bool up) {
    auto f = [&](StatKind k, int64_t n) { up ? inc(k, small, n) : dec(k, small, n); };
    f(kAllocation, 1); f(kActive, 1); f(kRequestedBytes, int64_t(b->requested));
    f(kAllocatedBytes, int64_t(b->size)); f(kActiveBytes, int64_t(b->size));
    if (b->workspace) f(kWorkspaceBytes, int64_t(b->size));
  }

  void record(const char* action, uint64_t addr, size_t size, bool workspace) {
    if (!recording) return;
    events.push_back(TraceEvent{action, addr, size, t_frame, workspace ? "workspace" : "",
                                trace_clock_us()});
    while (events.size() > max_entries) events.pop_front();
  }

  // One raw allocation under the capacity limit; returns the segment's single free block.
  Block* new_segment(size_t seg_size, bool small) {
    uint64_t reserved = st[kReservedBytes][0].current;
    if (seg_size > kMaxAccountedBytes - reserved) return nullptr;
    if (capacity != 0 && reserved + seg_size > capacity) return nullptr;
    void* base = raw->alloc(seg_size);
    if (base == nullptr) return nullptr;
    ++num_device_alloc;
    auto* seg = new Segment{next_segment_id++, base, seg_size, small, nullptr};
    auto* b = new Block;
    b->seg = seg; b->seg_id = seg->id; b->size = seg_size;
    seg->head = b;
    segments.emplace(seg->id, seg);
    inc(kSegment, small, 1);
    inc(kReservedBytes, small, int64_t(seg_size));
    record("segment_alloc", reinterpret_cast<uint64_t>(base), seg_size, false);
    return b;
  }

  void release_raw(Segment* seg) {
    for (Block* b = seg->head; b != nullptr;) { Block* n = b->next; delete b; b = n; }
    raw->free(seg->base, seg->size);
    delete seg;
  }

  // Releases every fully free segment (PyTorch's release_cached_blocks), oldest first.
  void release_cached() {
    for (auto it = segments.begin(); it != segments.end();) {
      Segment* seg = it->second;
      Block* head = seg->head;
      if (head->allocated || head->next != nullptr) { ++it; continue; }
      pool_of(seg->small).erase(head);
      record("segment_free", reinterpret_cast<uint64_t>(seg->base), seg->size, false);
      dec(kSegment, seg->small, 1);
      dec(kReservedBytes, seg->small, int64_t(seg->size));
      ++num_device_free;
      it = segments.erase(it);
      release_raw(seg);
    }
  }

  [[noreturn]] void throw_oom(size_t nbytes) {
    uint64_t allocated = st[kAllocatedBytes][0].current, reserved = st[kReservedBytes][0].current;
    uint64_t free_bytes = raw->free_bytes();
    if (capacity != 0) free_bytes = std::min<uint64_t>(free_bytes, capacity > reserved ? capacity - reserved : 0);
    ++num_ooms;
    record("oom", free_bytes == SIZE_MAX ? 0 : free_bytes, nbytes, false);
    std::string msg = str_cat(
        "oomlab: ", device.str(), " out of memory: tried to allocate ", format_size(nbytes),
        " (capacity ", capacity == 0 ? std::string("unlimited, but at most 4 EiB can be accounted") : format_size(capacity), "; ",
        format_size(allocated), " allocated, ", format_size(reserved), " reserved by oomlab; ",
        free_bytes == SIZE_MAX ? std::string("unknown") : format_size(free_bytes), " free)");
    if (reserved > allocated && reserved - allocated >= (reserved >> 2))
      msg += str_cat(". ", format_size(reserved - allocated),
                     " is reserved but unallocated (fragmentation): smaller or fewer distinct "
                     "tensor sizes may help");
    throw OutOfMemoryError(msg);
  }

  void* allocate(size_t nbytes, const char* tag) {
    if (nbytes > (SIZE_MAX >> 2)) throw_oom(nbytes);  // guards the rounding arithmetic
    const size_t size = round_size(nbytes);
    const bool small = size <= kSmallSize;
    Pool& pool = pool_of(small);
    Block key; key.size = size;
    Block* block = nullptr;
    if (!no_caching)
      if (auto it = pool.lower_bound(&key); it != pool.end()) block = *it;
    if (block == nullptr) {
      const size_t seg_size = no_caching ? size : segment_size_for(size);
      block = new_segment(seg_size, small);
      if (block == nullptr) {
        release_cached();
        ++num_alloc_retries;
        block = new_segment(seg_size, small);
        if (block == nullptr) throw_oom(nbytes);
      }
    } else {
      pool.erase(block);
    }
    // block is free and out of the pool: carve `size` from its front.
    int64_t d_count = 0, d_bytes = 0;
    if (block->is_split()) { d_count -= 1; d_bytes -= int64_t(block->size); }
    const size_t remainder = block->size - size;
    if (small ? remainder >= kMinBlockSize : remainder > kSmallSize) {
      auto* rest = new Block;
      rest->seg = block->seg; rest->seg_id = block->seg_id;
      rest->offset = block->offset + size; rest->size = remainder;
      rest->prev = block; rest->next = block->next;
      if (block->next != nullptr) block->next->prev = rest;
      block->next = rest;
      block->size = size;
      pool.insert(rest);
      d_count += 1; d_bytes += int64_t(remainder);
    }
    apply_split_delta(small, d_count, d_bytes);
    block->allocated = true;
    block->requested = nbytes;
    block->workspace = tag != nullptr && std::string_view(tag) == "workspace";
    block->frame = t_frame;
    account(block, small, true);
    const uint64_t addr = addr_of(block);
    active.emplace(addr, block);
    record("alloc", addr, block->size, block->workspace);
    return reinterpret_cast<void*>(addr);
  }

  void free(void* ptr) {
    auto it = active.find(reinterpret_cast<uint64_t>(ptr));
    if (it == active.end()) {   // reported once per allocator, counted always; never thrown
      if (num_invalid_frees++ == 0)
        std::fprintf(stderr, "oomlab: internal error: CachingAllocator(%s)::free: pointer %p was not returned "
                     "by allocate (double free?)\n", device.str().c_str(), ptr);
      return;
    }
    Block* block = it->second;
    active.erase(it);
    const bool small = block->seg->small;
    const uint64_t addr = addr_of(block);
    record("free_requested", addr, block->size, block->workspace);
    account(block, small, false);
    record("free_completed", addr, block->size, block->workspace);
    block->allocated = false; block->workspace = false; block->requested = 0;
    block->frame.clear();
    // Merge with free neighbours of the same segment.
    Pool& pool = pool_of(small);
    int64_t d_count = 0, d_bytes = 0;
    if (Block* p = block->prev; p != nullptr && !p->allocated) {
      pool.erase(p);
      d_count -= 1; d_bytes -= int64_t(p->size);
      block->offset = p->offset; block->size += p->size;
      block->prev = p->prev;
      if (p->prev != nullptr) p->prev->next = block; else block->seg->head = block;
      delete p;
    }
    if (Block* n = block->next; n != nullptr && !n->allocated) {
      pool.erase(n);
      d_count -= 1; d_bytes -= int64_t(n->size);
      block->size += n->size;
      block->next = n->next;
      if (n->next != nullptr) n->next->prev = block;
      delete n;
    }
    if (block->is_split()) { d_count += 1; d_bytes += int64_t(block->size); }
    apply_split_delta(small, d_count, d_bytes);
    pool.insert(block);
    if (no_caching) release_cached();
  }
};

CachingAllocator::CachingAllocator(Device device, std::unique_ptr<RawMemory> raw)
    : impl_(std::make_unique<Impl>(device, std::move(raw))), device_(device) {
  OOMLAB_CHECK(impl_->raw != nullptr, "CachingAllocator(", device.str(), "): null RawMemory");
  (void)trace_clock_us();  // pin the trace origin no later than the first allocator
}
CachingAllocator::~CachingAllocator() = default;

void* CachingAllocator::allocate(size_t nbytes, const char* tag) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->allocate(nbytes, tag);
}

void CachingAllocator::free(void* ptr) noexcept {
  if (ptr == nullptr) return;
  try {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->free(ptr);
  } catch (const std::exception& e) {   // e.g. bad_alloc recording the trace: the block stays leaked
    std::fprintf(stderr, "oomlab: internal error: CachingAllocator(%s)::free: %s\n", device_.str().c_str(), e.what());
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->release_cached();
}

void CachingAllocator::set_capacity(size_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->capacity = bytes;
}
size_t CachingAllocator::capacity() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->capacity;
}

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
    SegmentInfo info{reinterpret_cast<uint64_t>(seg->base), seg->size, seg->small, {}};
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
