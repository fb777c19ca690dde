// vision_kernels.h — kernel argument structs and tables for the vision ops of
// vision_ops.h (upsample2x, sigmoid, pixel_cross_entropy). conv_transpose2d has no
// tables of its own: it runs conv2d's kernels (conv.h) with the roles of x and dy swapped.
// All pointers are contiguous NCHW; backward kernels overwrite their output.
// CPU kernels: kernels/cpu/vision_cpu.cpp (register_vision_cpu_kernels()).
#pragma once
#include "engine/core/dispatch.h"
#include "engine/ops/loss.h"   // kNllIgnoreIndex

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

// forward: y = 1 / (1 + exp(-x)); backward: dx = dy * (1 - y) * y (y the saved output).
struct SigmoidArgs { const void* x; void* y; const void* dy; void* dx; int64_t n; };
KernelTable<SigmoidArgs>& sigmoid_forward_kernels();
KernelTable<SigmoidArgs>& sigmoid_backward_kernels();

// logits [N, C, HW], target [N, HW] (class or ignore_index).
// forward: logp = log_softmax over C (max-shifted); loss (scalar) = -sum over kept pixels
//   of logp[n, target, p] / count (count 0 -> NaN).
// backward: dlogits = (exp(logp) - onehot(target)) * dloss / count, 0 at ignored pixels
//   (dloss is read on the device).
struct PixelCrossEntropyArgs {
  const void* logits; void* logp; const int64_t* target; void* loss;
  const void* dloss; void* dlogits;
  int64_t N, C, HW;
  int64_t ignore_index = kNllIgnoreIndex;
};
KernelTable<PixelCrossEntropyArgs>& pixel_cross_entropy_forward_kernels();
KernelTable<PixelCrossEntropyArgs>& pixel_cross_entropy_backward_kernels();

}  // namespace oomlab
