// storage_resize.h — FSDP's storage resize (torch's storage().resize_(0) and back), for ZeRO
// stage 3: a storage's memory returned to its allocator while every tensor on it (saved
// views included) keeps the Storage, and allocated again before anything reads it.
// Contracts: release_storage leaves data null (no tensor on it may be read until
// reacquire_storage, which allocates nbytes again, contents undefined); both are no-ops when
// already in that state; the allocator's stats see the free and the allocation.
#pragma once
#include "engine/core/tensor.h"
#include "engine/memory/caching_allocator.h"

namespace oomlab {

inline void release_storage(Storage& s) noexcept {
  if (s.data) s.allocator->free(s.data);
  s.data = nullptr;
}

inline void reacquire_storage(Storage& s, const char* tag = "") {
  if (!s.data && s.nbytes > 0) s.data = s.allocator->allocate(s.nbytes, tag);
}

}  // namespace oomlab
