// vision_kernels.h — kernel argument structs and tables for upsample2x (sigmoid:
// kernels/activation.h, pixel_cross_entropy: kernels/loss.h). conv_transpose2d has no
// tables of its own: it runs conv2d's kernels (kernels/conv.h) with x and dy swapped.
// All pointers are contiguous NCHW; backward kernels overwrite their output.
// CPU kernels: kernels/cpu/vision_cpu.cpp (register_vision_cpu_kernels()).
#pragma once
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
KernelTable<Upsample2xArgs>& upsample2x_forward_kernels();
KernelTable<Upsample2xArgs>& upsample2x_backward_kernels();

}  // namespace oomlab
