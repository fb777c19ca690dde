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
// Indexed by the *input* device and the input dtype (any -> any conversion inside).
KernelTable<CopyArgs>& copy_kernels();

}  // namespace oomlab
