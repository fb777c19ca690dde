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

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "engine/memory/caching_allocator_impl.h"

namespace oomlab {

int64_t trace_clock_us() {  // declared in memory_export.h; shared with OpSpanScope
  static const auto origin = std::chrono::steady_clock::now();
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now() - origin).count();
}

namespace {
using namespace alloc_detail;

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

bool no_caching_from_env() {   // OOMLAB_NO_CACHING=1: one exact segment per block (header)
  const char* v = std::getenv("OOMLAB_NO_CACHING");
  return v != nullptr && *v != '\0' && std::string_view(v) != "0";
}
}  // namespace

CachingAllocator::Impl::Impl(Device d, std::unique_ptr<RawMemory> r)
    : device(d), raw(std::move(r)), no_caching(no_caching_from_env()) {}
CachingAllocator::Impl::~Impl() { for (auto& [id, seg] : segments) release_raw(seg); }

// Net change of the inactive_split stats over one operation (PyTorch applies the net).
void CachingAllocator::Impl::apply_split_delta(bool small, int64_t d_count, int64_t d_bytes) {
  if (d_count > 0) inc(kInactiveSplit, small, d_count);
  if (d_count < 0) dec(kInactiveSplit, small, -d_count);
  if (d_bytes > 0) inc(kInactiveSplitBytes, small, d_bytes);
  if (d_bytes < 0) dec(kInactiveSplitBytes, small, -d_bytes);
}

// Per-request stats of one allocated block: up on allocate, down on free.
void CachingAllocator::Impl::account(const Block* b, bool small, bool up) {
  auto f = [&](StatKind k, int64_t n) { up ? inc(k, small, n) : dec(k, small, n); };
  f(kAllocation, 1); f(kActive, 1); f(kRequestedBytes, int64_t(b->requested));
  f(kAllocatedBytes, int64_t(b->size)); f(kActiveBytes, int64_t(b->size));
  if (b->workspace) f(kWorkspaceBytes, int64_t(b->size));
}

void CachingAllocator::Impl::record(const char* action, uint64_t addr, size_t size, bool workspace) {
  if (!recording) return;
  events.push_back(TraceEvent{action, addr, size, current_frame(), workspace ? "workspace" : "",
                              trace_clock_us()});
  while (events.size() > max_entries) events.pop_front();
}

// One raw allocation under the capacity limit; returns the segment's single free block.
// The segment belongs to the active pool.
alloc_detail::Block* CachingAllocator::Impl::new_segment(size_t seg_size, bool small) {
  uint64_t reserved = st[kReservedBytes][0].current;
  if (seg_size > kMaxAccountedBytes - reserved) return nullptr;
  if (capacity != 0 && reserved + seg_size > capacity) return nullptr;
  void* base = raw->alloc(seg_size);
  if (base == nullptr) return nullptr;
  ++num_device_alloc;
  auto* seg = new Segment{next_segment_id++, base, seg_size, small, nullptr, active_pool};
  auto* b = new Block;
  b->seg = seg; b->seg_id = seg->id; b->size = seg_size;
  seg->head = b;
  segments.emplace(seg->id, seg);
  inc(kSegment, small, 1);
  inc(kReservedBytes, small, int64_t(seg_size));
  record("segment_alloc", reinterpret_cast<uint64_t>(base), seg_size, false);
  return b;
}

void CachingAllocator::Impl::release_raw(Segment* seg) {
  for (Block* b = seg->head; b != nullptr;) { Block* n = b->next; delete b; b = n; }
  raw->free(seg->base, seg->size);
  delete seg;
}

// Releases every fully free segment (PyTorch's release_cached_blocks), oldest first,
// except those of a live graph pool (a captured graph still writes into them).
void CachingAllocator::Impl::release_cached() {
  for (auto it = segments.begin(); it != segments.end();) {
    Segment* seg = it->second;
    Block* head = seg->head;
    if (head->allocated || head->next != nullptr || live_graph_pools.count(seg->pool)) { ++it; continue; }
    pool_of(seg).erase(head);
    record("segment_free", reinterpret_cast<uint64_t>(seg->base), seg->size, false);
    dec(kSegment, seg->small, 1);
    dec(kReservedBytes, seg->small, int64_t(seg->size));
    ++num_device_free;
    it = segments.erase(it);
    release_raw(seg);
  }
}

// The request as asked; where the device would have been asked for more (a new segment of
// the small pool's 2 MiB or the large pool's 20 MiB, PyTorch's "Tried to allocate"), that
// too, so a request smaller than the free memory still reads as an out-of-memory.
void CachingAllocator::Impl::throw_oom(size_t nbytes, size_t segment_bytes) {
  uint64_t allocated = st[kAllocatedBytes][0].current, reserved = st[kReservedBytes][0].current;
  uint64_t free_bytes = raw->free_bytes();
  if (capacity != 0) free_bytes = std::min<uint64_t>(free_bytes, capacity > reserved ? capacity - reserved : 0);
  ++num_ooms;
  record("oom", free_bytes == SIZE_MAX ? 0 : free_bytes, nbytes, false);
  std::string msg =
      str_cat(device.str(), " out of memory: tried to allocate ", format_size(nbytes),
              segment_bytes > nbytes ? str_cat(", which needs a new ", format_size(segment_bytes), " segment")
                                     : std::string(),
              " (capacity ",
              capacity == 0 ? std::string("unlimited, but at most 4 EiB can be accounted") : format_size(capacity),
              "; ", format_size(allocated), " allocated, ", format_size(reserved), " reserved by oomlab; ",
              free_bytes == SIZE_MAX ? std::string("unknown") : format_size(free_bytes), " free)");
  if (reserved > allocated && reserved - allocated >= (reserved >> 2))
    msg += str_cat(". ", format_size(reserved - allocated),
                   " is reserved but unallocated (fragmentation): smaller or fewer distinct "
                   "tensor sizes may help");
  if (active_pool != 0) msg += " (while capturing a graph into a private pool)";
  throw OutOfMemoryError(msg);
}

// A free block of at least `size` from the active pool (best fit), or a new segment's,
// out of its pool; throws OutOfMemoryError after one release-and-retry.
alloc_detail::Block* CachingAllocator::Impl::take_block(size_t size, bool small, size_t nbytes) {
  Pool& pool = pool_of(active_pool, small);
  Block key; key.size = size;
  if (!no_caching)
    if (auto it = pool.lower_bound(&key); it != pool.end()) {
      Block* block = *it;
      pool.erase(it);
      return block;
    }
  const size_t seg_size = no_caching ? size : segment_size_for(size);
  Block* block = new_segment(seg_size, small);
  if (block == nullptr) {
    release_cached();
    ++num_alloc_retries;
    block = new_segment(seg_size, small);
    if (block == nullptr) throw_oom(nbytes, seg_size);
  }
  return block;
}

void* CachingAllocator::Impl::allocate(size_t nbytes, const char* tag) {
  if (nbytes > (SIZE_MAX >> 2)) throw_oom(nbytes, 0);  // guards the rounding arithmetic
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  Block* block = take_block(size, small, nbytes);
  // block is free and out of its pool: carve `size` from its front.
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
    pool_of(block->seg).insert(rest);
    d_count += 1; d_bytes += int64_t(remainder);
  }
  apply_split_delta(small, d_count, d_bytes);
  block->allocated = true;
  block->requested = nbytes;
  block->workspace = tag != nullptr && std::string_view(tag) == "workspace";
  block->frame = current_frame();
  account(block, small, true);
  const uint64_t addr = addr_of(block);
  active.emplace(addr, block);
  record("alloc", addr, block->size, block->workspace);
  return reinterpret_cast<void*>(addr);
}

void CachingAllocator::Impl::merge_free_neighbours(Block* block, Pool& pool, int64_t* d_count, int64_t* d_bytes) {
  if (Block* p = block->prev; p != nullptr && !p->allocated) {
    pool.erase(p);
    *d_count -= 1; *d_bytes -= int64_t(p->size);
    block->offset = p->offset; block->size += p->size;
    block->prev = p->prev;
    if (p->prev != nullptr) p->prev->next = block; else block->seg->head = block;
    delete p;
  }
  if (Block* n = block->next; n != nullptr && !n->allocated) {
    pool.erase(n);
    *d_count -= 1; *d_bytes -= int64_t(n->size);
    block->size += n->size;
    block->next = n->next;
    if (n->next != nullptr) n->next->prev = block;
    delete n;
  }
}

void CachingAllocator::Impl::free(void* ptr) {
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
  Pool& pool = pool_of(block->seg);   // the segment's pool, whichever is active
  int64_t d_count = 0, d_bytes = 0;
  merge_free_neighbours(block, pool, &d_count, &d_bytes);
  if (block->is_split()) { d_count += 1; d_bytes += int64_t(block->size); }
  apply_split_delta(small, d_count, d_bytes);
  pool.insert(block);
  if (no_caching) release_cached();
}

uint64_t CachingAllocator::Impl::begin_graph_pool() {
  OOMLAB_CHECK(active_pool == 0, "CachingAllocator(", device.str(), "): a graph pool (", active_pool,
               ") is already active; captures do not nest");
  active_pool = next_pool_id++;
  live_graph_pools.insert(active_pool);
  return active_pool;
}

// The pool's segments join the default pool (their free blocks become reusable by
// anyone; blocks still allocated return there when freed).
void CachingAllocator::Impl::release_graph_pool(uint64_t pool) {
  if (active_pool == pool) active_pool = 0;
  if (live_graph_pools.erase(pool) == 0) return;
  auto freed = free_pools.find(pool);
  for (auto& [id, seg] : segments)
    if (seg->pool == pool) seg->pool = 0;
  if (freed == free_pools.end()) return;
  for (Block* b : freed->second.small) pool_of(0, true).insert(b);
  for (Block* b : freed->second.large) pool_of(0, false).insert(b);
  free_pools.erase(freed);
}

int64_t CachingAllocator::Impl::graph_pools_reserved_bytes() const {
  int64_t total = 0;
  for (const auto& [id, seg] : segments)
    if (seg->pool != 0) total += int64_t(seg->size);
  return total;
}

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


uint64_t CachingAllocator::begin_graph_pool() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->begin_graph_pool();
}

void CachingAllocator::end_graph_pool() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->active_pool = 0;
}

void CachingAllocator::release_graph_pool(uint64_t pool) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->release_graph_pool(pool);
}
}  // namespace oomlab
