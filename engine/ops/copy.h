// copy.h — strided copy with dtype conversion (contiguous(), to(dtype), copy_).
// Kernel contract: out is contiguous in `out_dtype`; `in` is read through (shape,
// strides, offset already applied to the pointer) in `in_dtype`. Rank <= 8.
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
// Indexed by the *input* device and the input dtype (any -> any conversion inside).
KernelTable<CopyArgs>& copy_kernels();

}  // namespace oomlab
