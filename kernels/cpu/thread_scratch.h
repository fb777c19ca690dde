// thread_scratch.h — grow-only thread-local scratch buffers for the CPU kernels.
// Contract: thread_scratch<T, Family, kSlots>(slot, n) returns at least n Ts that belong to the
// calling thread; the pointer stays valid until the same thread asks the same (T, Family, slot)
// for more, and the contents are unspecified. Each kernel family passes its own tag type, so
// families that call one another (im2col dispatching to the direct or tap kernels, the tiles
// calling the own GEMM) never hand out one buffer twice.
#pragma once

#include <cstddef>
#include <vector>

namespace oomlab {

template <class T, class Family, int kSlots> T* thread_scratch(int slot, size_t n) {
  thread_local std::vector<T> bufs[kSlots];
  std::vector<T>& b = bufs[slot];
  if (b.size() < n) {
    std::vector<T>().swap(b);  // free the old buffer first: the peak stays one buffer
    b.resize(n);
  }
  return b.data();
}

}  // namespace oomlab
