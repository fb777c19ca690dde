// cuda_host_allocator.cpp — pinned host blocks with per-use events (cuda_host_allocator.h).
// One global pool: blocks by base address; free blocks by size class; each block keeps the
// events of the copies queued from it, and a freed block with live events stays out of the
// free lists until a later pinned_alloc finds them all complete (cudaEventQuery).
#include "kernels/cuda/cuda_host_allocator.h"

#include <map>
#include <mutex>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_stream.h"

namespace oomlab::cuda {
namespace {

struct Block {
  size_t size = 0;
  bool in_use = false;
  std::vector<cudaEvent_t> events;   // copies queued from this block, not yet seen complete
};

struct Pool {
  std::mutex mu;
  std::map<char*, Block> blocks;              // by base address
  std::multimap<size_t, char*> free_blocks;   // size -> base, events all complete
  std::vector<char*> awaiting;                // freed, some event still pending
  std::vector<cudaEvent_t> spare_events;
};
Pool& pool() { static Pool* p = new Pool; return *p; }   // never destroyed: outlives CUDA teardown

size_t size_class(size_t bytes) {
  size_t s = 4096;
  while (s < bytes) s <<= 1;
  return s;
}

bool events_done(Pool& p, Block& b) {   // drops completed events; true when none is left
  std::vector<cudaEvent_t> left;
  for (cudaEvent_t e : b.events) {
    const cudaError_t st = cudaEventQuery(e);
    if (st == cudaErrorNotReady) { left.push_back(e); continue; }
    if (st != cudaSuccess) throw_cuda_error(st, "cudaEventQuery(pinned block event)", __FILE__, __LINE__);
    p.spare_events.push_back(e);
  }
  b.events.swap(left);
  return b.events.empty();
}

void collect_completed(Pool& p) {   // awaiting blocks whose copies finished become free
  std::vector<char*> still;
  for (char* base : p.awaiting) {
    Block& b = p.blocks.at(base);
    if (events_done(p, b)) p.free_blocks.emplace(b.size, base);
    else still.push_back(base);
  }
  p.awaiting.swap(still);
}
}  // namespace

void* pinned_alloc(size_t bytes) {
  Pool& p = pool();
  const size_t size = size_class(bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(p.mu);
  collect_completed(p);
  if (auto it = p.free_blocks.find(size); it != p.free_blocks.end()) {
    char* base = it->second;
    p.free_blocks.erase(it);
    p.blocks.at(base).in_use = true;
    return base;
  }
  void* ptr = nullptr;
  const cudaError_t st = cudaHostAlloc(&ptr, size, cudaHostAllocDefault);
  if (st == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw OutOfMemoryError(str_cat("pinned host memory: cudaHostAlloc of ", size, " bytes failed (",
                                   cudaGetErrorString(st), ")"));
  }
  if (st != cudaSuccess) throw_cuda_error(st, "cudaHostAlloc", __FILE__, __LINE__);
  Block& b = p.blocks[static_cast<char*>(ptr)];
  b.size = size;
  b.in_use = true;
  return ptr;
}

void pinned_free(void* block) {
  if (!block) return;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.blocks.find(static_cast<char*>(block));
  if (it == p.blocks.end() || !it->second.in_use) return;   // a deleter must not throw
  it->second.in_use = false;
  if (events_done(p, it->second)) p.free_blocks.emplace(it->second.size, it->first);
  else p.awaiting.push_back(it->first);
}

void copy_from_pinned(void* device_dst, const void* pinned_src, size_t bytes, int device) {
  Pool& p = pool();
  const char* src = static_cast<const char*>(pinned_src);
  std::lock_guard<std::mutex> lock(p.mu);
  auto it = p.blocks.upper_bound(const_cast<char*>(src));
  OOMLAB_CHECK_T(DeviceError, it != p.blocks.begin(), "copy_from_pinned: source is not pinned host memory");
  --it;
  Block& b = it->second;
  OOMLAB_CHECK_T(DeviceError, b.in_use && src + bytes <= it->first + b.size,
                 "copy_from_pinned: ", bytes, " bytes at offset ", src - it->first,
                 " are not inside a live pinned block of ", b.size, " bytes");
  DeviceGuard guard(device);
  const cudaStream_t stream = compute_stream(device);
  CUDA_CHECK(cudaMemcpyAsync(device_dst, src, bytes, cudaMemcpyHostToDevice, stream));
  cudaEvent_t e = nullptr;
  if (!p.spare_events.empty()) { e = p.spare_events.back(); p.spare_events.pop_back(); }
  else CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(e, stream));
  b.events.push_back(e);
}

PinnedPoolStats pinned_pool_stats() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  PinnedPoolStats s;
  for (auto& [base, b] : p.blocks) {
    ++s.blocks;
    s.reserved_bytes += b.size;
    s.in_use += b.in_use;
  }
  s.awaiting_copies = p.awaiting.size();
  return s;
}

}  // namespace oomlab::cuda
