// cuda_host_allocator.h — the CUDA backend's pool of page-locked host blocks (PyTorch's
// CachingHostAllocator), behind engine/memory/pinned_host.h's hooks.
// Contracts:
//  * pinned_alloc(n): a block of at least n bytes (sizes round up to a power of two, >= 4 KiB)
//    from cudaHostAlloc, or a free block of that size class whose recorded copies have all
//    completed. OutOfMemoryError when cudaHostAlloc fails. Thread-safe (loader workers).
//  * pinned_free(p): the block (p = what pinned_alloc returned) goes back to the pool; it is
//    reused only once every event recorded for it has completed.
//  * copy_from_pinned(dst, src, n, device): cudaMemcpyAsync on the device's compute stream
//    from anywhere inside a live pinned block, then an event recorded for that block; it
//    does not wait. DeviceError when src is not inside a block of this pool.
//  * Blocks are never returned to the driver (the process keeps them until exit).
#pragma once
#include <cstddef>

namespace oomlab::cuda {

struct PinnedPoolStats {
  size_t blocks = 0;          // cudaHostAlloc'd blocks
  size_t reserved_bytes = 0;  // their total size
  size_t in_use = 0;          // handed out, not yet freed
  size_t awaiting_copies = 0; // freed, with a recorded copy still running
};

void* pinned_alloc(size_t bytes);
void pinned_free(void* block);
void copy_from_pinned(void* device_dst, const void* pinned_src, size_t bytes, int device);
PinnedPoolStats pinned_pool_stats();

}  // namespace oomlab::cuda
