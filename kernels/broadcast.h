// broadcast.h — kernel argument structs and tables of the broadcast family
// (engine/ops/broadcast.h): a binary op (add, sub, mul, div) over two inputs read through
// strides (0 on a broadcast dim) into a contiguous output, and sum_to, its adjoint: the sum
// of a contiguous tensor over the dims an output of fewer elements broadcasts along.
// Rank <= 8 (shapes right-aligned and padded by the op). Deterministic: sum_to adds each
// output's inputs in a fixed order (CPU: increasing input index, in double for float32;
// CUDA: a fixed block reduction), independent of the thread count.
// CPU kernels: kernels/cpu/broadcast_cpu.cpp; CUDA: kernels/cuda/broadcast.cu.
#pragma once
#include <cstdint>
#include <utility>

#include "engine/core/dispatch.h"

namespace oomlab {

enum class BinaryOp : int32_t { add, sub, mul, div };

// out[i] = a[at(i, a_strides)] op b[at(i, b_strides)] for every index i of `shape`
// (out contiguous); a and b are contiguous buffers of a_n and b_n elements.
struct BroadcastArgs {
  void* out; const void* a; const void* b; BinaryOp op;
  int ndim; int64_t shape[8]; int64_t a_strides[8]; int64_t b_strides[8];
  int64_t a_n, b_n;
};
// out[at(i, out_strides)] = sum of in[i] over the indices i of `shape` (in contiguous) that
// map to it; out_strides are out's contiguous strides with 0 on each summed dim; out has
// out_n elements (overwritten).
struct SumToArgs { void* out; const void* in; int ndim; int64_t shape[8]; int64_t out_strides[8]; int64_t out_n; };

OOMLAB_KERNEL_TABLE(broadcast_binary, BroadcastArgs, "broadcast_binary")
OOMLAB_KERNEL_TABLE(sum_to, SumToArgs, "sum_to")

// The offset of contiguous index i of `shape` through `strides` (the CPU kernels'; the CUDA
// kernels have a device twin in kernels/cuda/broadcast.cu).
inline int64_t strided_offset(int64_t i, int ndim, const int64_t* shape, const int64_t* strides) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}
// sum_to's loops: the kept dims (output index o -> input base offset) and the summed dims
// (r -> offset from the base), each with the input's contiguous strides.
struct SumToPlan { int nk = 0, nr = 0; int64_t kshape[8], kstride[8], rshape[8], rstride[8]; int64_t r_n = 1; };
inline SumToPlan sum_to_plan(const SumToArgs& a) {
  SumToPlan p;
  int64_t stride = 1;
  for (int d = a.ndim - 1; d >= 0; --d) {
    if (a.shape[d] == 1) continue;
    if (a.out_strides[d] == 0) {
      p.rshape[p.nr] = a.shape[d];
      p.rstride[p.nr++] = stride;
      p.r_n *= a.shape[d];
    } else {
      p.kshape[p.nk] = a.shape[d];
      p.kstride[p.nk++] = stride;
    }
    stride *= a.shape[d];
  }
  for (int i = 0; i < p.nk / 2; ++i) {   // collected innermost first: put outermost first
    std::swap(p.kshape[i], p.kshape[p.nk - 1 - i]);
    std::swap(p.kstride[i], p.kstride[p.nk - 1 - i]);
  }
  for (int i = 0; i < p.nr / 2; ++i) {
    std::swap(p.rshape[i], p.rshape[p.nr - 1 - i]);
    std::swap(p.rstride[i], p.rstride[p.nr - 1 - i]);
  }
  return p;
}

}  // namespace oomlab
