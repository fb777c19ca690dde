// copy.h — the copy family's kernel table: strided copy with dtype conversion, behind
// Tensor::copy_ and so contiguous(), clone(), to(dtype) (engine/ops/view.h) and cat
// (engine/ops/concat.h). Kernel contract: out is written through out_strides in
// `out_dtype`; `in` is read through (shape, in_strides, offset already applied to the
// pointer) in `in_dtype`. Rank <= 8. CPU kernel: kernels/cpu/copy_cpu.cpp; CUDA:
// kernels/cuda/copy.cu (either side may be host memory there).
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

struct CopyArgs {
  void* out; DType out_dtype;
  const void* in; DType in_dtype;
  int ndim; int64_t shape[8]; int64_t in_strides[8]; int64_t out_strides[8];
};
// Elements to copy and whether each side is contiguous (size-1 dims ignored); shared by
// the CPU and CUDA copy kernels.
struct CopyLayout { int64_t n; bool in_contig, out_contig; };
inline CopyLayout copy_layout(const CopyArgs& a) {
  CopyLayout l{1, true, true};
  for (int d = a.ndim - 1; d >= 0; --d) {
    if (a.shape[d] != 1 && a.in_strides[d] != l.n) l.in_contig = false;
    if (a.shape[d] != 1 && a.out_strides[d] != l.n) l.out_contig = false;
    l.n *= a.shape[d];
  }
  return l;
}
// Indexed by the device of the copy's non-cpu side (cpu for host copies) and the input
// dtype (any -> any conversion inside).
OOMLAB_KERNEL_TABLE(copy, CopyArgs, "copy")

}  // namespace oomlab
