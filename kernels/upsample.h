// upsample.h — kernel argument struct and tables of the upsample family
// (engine/ops/upsample.h): 2x nearest / bilinear upsampling of contiguous NCHW planes,
// forward and backward (backward overwrites dx; a gather, no atomics). CPU kernels:
// kernels/cpu/upsample_cpu.cpp; CUDA: kernels/cuda/upsample.cu.
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

// x [NC, H, W] -> y [NC, 2H, 2W]; backward: dx [NC, H, W] from dy [NC, 2H, 2W].
// bilinear: align_corners=false, source index (dst + 0.5) / 2 - 0.5 clamped at 0.
struct Upsample2xArgs {
  int64_t NC, H, W;
  bool bilinear;
  const void* x; void* y;      // forward
  const void* dy; void* dx;    // backward
};

OOMLAB_KERNEL_TABLE(upsample2x_forward, Upsample2xArgs, "upsample2x")
OOMLAB_KERNEL_TABLE(upsample2x_backward, Upsample2xArgs, "upsample2x_backward")

}  // namespace oomlab
