// caching_allocator.h — one caching allocator per device, modelled on PyTorch's
// CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp) at a tenth of the size.
//
// Policy (invariant, identical on every device so meta reproduces cpu/cuda exactly):
//   * sizes rounded up to 512 B (kMinBlockSize);
//   * small pool: requests <= 1 MiB, carved from 2 MiB segments (kSmallBuffer);
//   * large pool: requests in (1 MiB, 10 MiB) get a 20 MiB segment (kLargeBuffer);
//     requests >= 10 MiB get a segment rounded up to 2 MiB (kRoundLarge);
//   * best fit (smallest cached block that fits; ties by address) within the pool;
//   * split when the remainder is >= 512 B (small pool) or > 1 MiB (large pool);
//   * merge with free neighbours of the same segment on free;
//   * on raw-allocation failure or capacity exceeded: free all cached unsplit segments
//     (empty_cache), count num_alloc_retries, retry once; on second failure count
//     num_ooms, record an "oom" trace event and throw OutOfMemoryError naming requested,
//     capacity, allocated and reserved bytes. The allocator stays consistent afterwards.
// Raw memory comes from RawMemory: host (aligned malloc), meta (fake addresses; nothing
// is touched), cuda (cudaMalloc, in kernels/cuda). Thread-safe (one mutex).
// Debug switch OOMLAB_NO_CACHING=1 (PyTorch's PYTORCH_NO_CUDA_MEMORY_CACHING), read when
// an allocator is created: every block gets its own segment of its rounded size, released
// on free, so memory checkers (compute-sanitizer memcheck, ASan) see each tensor's bounds
// (up to the 512 B rounding). Traces and stats then no longer follow the policy above.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace oomlab {

inline constexpr size_t kMinBlockSize = 512;
inline constexpr size_t kSmallSize = 1 << 20;        // 1 MiB
inline constexpr size_t kSmallBuffer = 2 << 20;      // 2 MiB
inline constexpr size_t kLargeBuffer = 20 << 20;     // 20 MiB
inline constexpr size_t kMinLargeAlloc = 10 << 20;   // 10 MiB
inline constexpr size_t kRoundLarge = 2 << 20;       // 2 MiB

// Source of raw device memory. alloc returns nullptr on failure (never throws).
struct RawMemory {
  virtual ~RawMemory() = default;
  virtual void* alloc(size_t nbytes) = 0;
  virtual void free(void* ptr, size_t nbytes) = 0;
  virtual const char* name() const = 0;          // "host", "meta", "cuda"
  // Bytes the backing store could still provide (for OOM messages); SIZE_MAX if unknown.
  virtual size_t free_bytes() const { return SIZE_MAX; }
};
std::unique_ptr<RawMemory> make_host_raw_memory();   // 64-byte aligned, zero-cost free
std::unique_ptr<RawMemory> make_meta_raw_memory();   // fake, never-reused, 512-aligned addresses
// Backends with their own memory (cuda) register a factory at start-up (the kernel
// registration point); allocator_for() on an unregistered type throws DeviceError.
using RawMemoryFactory = std::unique_ptr<RawMemory> (*)(int device_index);
void register_raw_memory(DeviceType type, RawMemoryFactory factory);

// One entry of the allocator's trace, in memory_viz's vocabulary:
// action in {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "oom"}.
struct TraceEvent {
  std::string action;
  uint64_t addr = 0;
  size_t size = 0;        // for alloc/free: the rounded block size; for oom: requested
  std::string frame;      // MemoryContext at the time: "layer/phase", e.g. "features.0/fwd"
  std::string tag;        // "" or e.g. "workspace"
  int64_t time_us = 0;
};

// Public view of one segment for snapshots.
struct BlockInfo { uint64_t addr; size_t size; size_t requested; bool allocated; std::string frame; };
struct SegmentInfo { uint64_t addr; size_t total_size; bool small_pool; std::vector<BlockInfo> blocks;
                     uint64_t pool_id = 0; };   // 0: the default pool; else a graph pool

class CachingAllocator {
 public:
  CachingAllocator(Device device, std::unique_ptr<RawMemory> raw);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns a pointer to at least nbytes (nullptr for nbytes == 0). Throws OutOfMemoryError.
  // tag "workspace" marks library workspaces (counted also in workspace_bytes.*).
  void* allocate(size_t nbytes, const char* tag = "");
  // ptr must come from allocate; nullptr is a no-op. Never throws (frees run in
  // destructors): an unknown pointer is reported on stderr once and counted in
  // num_invalid_frees.
  void free(void* ptr) noexcept;
  void empty_cache();                // release all fully free segments to RawMemory

  // Graph pools (PyTorch's private memory pool of a CUDA-graph capture, torch.cuda.graph's
  // `pool`): between begin_graph_pool() and end_graph_pool() every allocation is carved from
  // a pool of its own, in segments allocated for it (a capture never reuses blocks cached
  // by eager work); frees return blocks to their segment's pool whenever they happen. After
  // end_graph_pool() the pool's blocks serve nobody else (a replay writes into them) and
  // empty_cache() keeps its segments, until release_graph_pool(id) (the graph is
  // destroyed) hands them to the default pool. One pool active at a time (no nesting).
  uint64_t begin_graph_pool();
  void end_graph_pool();
  void release_graph_pool(uint64_t pool);

  void set_capacity(size_t bytes);   // 0 = unlimited; counts reserved (segment) bytes
  size_t capacity() const;
  Device device() const { return device_; }

  // PyTorch-named stats: for S in {allocation, segment, active, inactive_split,
  // allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes,
  // workspace_bytes} x P in {all, small_pool, large_pool} x K in {current, peak,
  // allocated, freed}: key "S.P.K"; plus num_alloc_retries, num_ooms,
  // num_device_alloc, num_device_free and num_invalid_frees (oomlab's: frees of unknown
  // pointers, always 0 unless there is a bug), num_graph_pools (live graph pools) and
  // graph_pools_reserved_bytes (bytes of the segments they own; also in reserved_bytes).
  std::map<std::string, int64_t> stats() const;
  int64_t stat(const std::string& key) const;   // throws ValueError for an unknown key
  void reset_peak_stats();                       // peaks := current
  void reset_accumulated_stats();                // allocated/freed counters and num_* := 0
  // A second peak per stat for measuring a window (a phase of a training step) without
  // moving the peaks stats() reports: window_peak("allocated_bytes.all") is the highest
  // current value since reset_window_peaks() (which sets every window peak to current).
  void reset_window_peaks();
  int64_t window_peak(const std::string& stat) const;

  // Trace recording (off by default; bounded by max_entries, oldest dropped).
  void record_history(bool enabled, size_t max_entries = 1 << 20);
  bool recording_history() const;
  std::vector<TraceEvent> trace() const;
  void clear_trace();
  std::vector<SegmentInfo> segments() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Device device_;
};

// The allocator of a device (created on first use; cuda allocators come from the
// CUDA backend's registration). Same object for the lifetime of the process unless
// reset_allocators() is called (tests, experiment points run in isolation; it also clears
// the kernel-choice counts of kernel_choices.h).
CachingAllocator& allocator_for(Device device);
void reset_allocators();

// Thread-local label attached to trace events and snapshot frames: "layer/phase".
class MemoryContext {
 public:
  MemoryContext(const std::string& layer, const char* phase);  // phase: fwd, bwd, optim, data, eval
  ~MemoryContext();
  static std::string current();   // "" when none
 private:
  std::string saved_;
};

}  // namespace oomlab
