// pinned_host.h — page-locked ("pinned") host memory for host-to-device copies: PyTorch's
// DataLoader(pin_memory=True) and tensor.to(device, non_blocking=True).
// Contracts:
//  * has_pinned_host_memory(d): d's backend registered pinned hooks (engine/core/backend.h);
//    false for cpu and meta (their memory is the host's: there is nothing to pin) and for a
//    build without the accelerator backend.
//  * pinned_host_alloc(d, bytes) returns a block of at least `bytes` page-locked bytes whose
//    deleter hands it back to the backend's pinned pool. The pool reuses a block only after
//    every copy queued from it has completed (PyTorch's CachingHostAllocator records an event
//    per use), so dropping the pointer right after copy_from_pinned is safe. Throws
//    OutOfMemoryError when the host cannot pin more, ValueError without a pinned backend.
//  * copy_from_pinned(d, dst, src, bytes) queues the copy of `bytes` from inside a pinned
//    block to device memory `dst` on d's compute stream and returns without waiting for it
//    (non_blocking): later work on that stream sees the data.
#pragma once
#include <cstddef>
#include <memory>

#include "engine/core/device.h"

namespace oomlab {

bool has_pinned_host_memory(const Device& device);
std::shared_ptr<void> pinned_host_alloc(const Device& device, size_t bytes);
void copy_from_pinned(const Device& device, void* device_dst, const void* pinned_src, size_t bytes);

}  // namespace oomlab
