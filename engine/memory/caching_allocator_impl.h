// caching_allocator_impl.h — the caching allocator's private state (blocks, segments,
// free pools, stats), shared by caching_allocator.cpp (the policy: allocate, free,
// release, graph pools) and caching_allocator_stats.cpp (stats, trace, snapshots).
// Not part of the public interface: include caching_allocator.h instead.
// Graph pools (PyTorch's private memory pools of CUDA-graph capture): every segment
// belongs to one pool, 0 the default; while a pool is active every allocation is carved
// from, and every new segment belongs to, that pool; a free returns a block to its
// segment's pool; segments of a live pool are never released (a graph replays into them).
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

namespace oomlab {
namespace alloc_detail {

enum StatKind { kAllocation, kSegment, kActive, kInactiveSplit, kAllocatedBytes, kReservedBytes,
                kActiveBytes, kInactiveSplitBytes, kRequestedBytes, kWorkspaceBytes, kNumKinds };
inline const char* const kKindNames[kNumKinds] = {
    "allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
    "active_bytes", "inactive_split_bytes", "requested_bytes", "workspace_bytes"};
inline const char* const kPoolNames[3] = {"all", "small_pool", "large_pool"};

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
                 Block* head = nullptr; uint64_t pool = 0; };

inline uint64_t addr_of(const Block* b) { return reinterpret_cast<uint64_t>(b->seg->base) + b->offset; }

struct BlockLess {  // best fit: smallest size, then oldest segment, then lowest offset
  bool operator()(const Block* a, const Block* b) const {
    if (a->size != b->size) return a->size < b->size;
    if (a->seg_id != b->seg_id) return a->seg_id < b->seg_id;
    return a->offset < b->offset;
  }
};
using Pool = std::set<Block*, BlockLess>;
struct FreePools { Pool small, large; };

std::string& current_frame();   // MemoryContext's thread-local label

}  // namespace alloc_detail

struct CachingAllocator::Impl {
  using Block = alloc_detail::Block;
  using Segment = alloc_detail::Segment;
  using Pool = alloc_detail::Pool;
  using StatKind = alloc_detail::StatKind;

  Device device;
  std::unique_ptr<RawMemory> raw;
  mutable std::mutex mu;
  std::map<uint64_t, alloc_detail::FreePools> free_pools;   // pool id -> its free blocks
  uint64_t active_pool = 0;              // where allocations go (0: the default pool)
  uint64_t next_pool_id = 1;
  std::set<uint64_t> live_graph_pools;   // begun and not yet released
  std::unordered_map<uint64_t, Block*> active;   // address -> allocated block
  std::map<uint64_t, Segment*> segments;         // id (creation order) -> segment
  uint64_t next_segment_id = 1;
  alloc_detail::Stat st[alloc_detail::kNumKinds][3];
  int64_t num_alloc_retries = 0, num_ooms = 0, num_device_alloc = 0, num_device_free = 0;
  int64_t num_invalid_frees = 0;   // frees of pointers allocate() never returned (a bug)
  size_t capacity = 0;
  bool recording = false;
  size_t max_entries = 1 << 20;
  std::deque<TraceEvent> events;
  const bool no_caching;           // OOMLAB_NO_CACHING=1 (caching_allocator.h)

  Impl(Device d, std::unique_ptr<RawMemory> r);
  ~Impl();

  Pool& pool_of(uint64_t pool, bool small) {
    auto& p = free_pools[pool];
    return small ? p.small : p.large;
  }
  Pool& pool_of(const Segment* seg) { return pool_of(seg->pool, seg->small); }
  void inc(StatKind k, bool small, int64_t n) { st[k][0].increase(n); st[k][small ? 1 : 2].increase(n); }
  void dec(StatKind k, bool small, int64_t n) { st[k][0].decrease(n); st[k][small ? 1 : 2].decrease(n); }
  void apply_split_delta(bool small, int64_t d_count, int64_t d_bytes);
  void account(const Block* b, bool small, bool up);
  void record(const char* action, uint64_t addr, size_t size, bool workspace);
  Block* new_segment(size_t seg_size, bool small);
  void release_raw(Segment* seg);
  void release_cached();
  [[noreturn]] void throw_oom(size_t nbytes, size_t segment_bytes);
  Block* take_block(size_t size, bool small, size_t nbytes);
  void* allocate(size_t nbytes, const char* tag);
  void free(void* ptr);
  void merge_free_neighbours(Block* block, Pool& pool, int64_t* d_count, int64_t* d_bytes);
  uint64_t begin_graph_pool();
  void release_graph_pool(uint64_t pool);
  int64_t graph_pools_reserved_bytes() const;
};

}  // namespace oomlab
