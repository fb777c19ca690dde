// loss.h — kernel argument structs and tables of the loss family (engine/ops/loss.h):
// nll_loss over [N, C] log-probabilities and pixel_cross_entropy over NCHW logits,
// forward and backward, mean over the targets that are not ignore_index (count 0 ->
// NaN, as PyTorch). dloss is read on the device; backward kernels overwrite their
// output. CPU kernels: kernels/cpu/loss_cpu.cpp; CUDA: kernels/cuda/loss.cu.
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

inline constexpr int64_t kNllIgnoreIndex = -100;   // PyTorch's default ignore_index

// loss = -sum_{i: target[i] != ignore_index} logp[i, target[i]] / count (dloss read on device)
struct NllArgs {
  const void* logp; const int64_t* target; void* loss; const void* dloss; void* dlogp; int64_t N, C;
  int64_t ignore_index = kNllIgnoreIndex;
};

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

OOMLAB_KERNEL_TABLE(nll_forward, NllArgs, "nll_loss")
OOMLAB_KERNEL_TABLE(nll_backward, NllArgs, "nll_loss_backward")
OOMLAB_KERNEL_TABLE(pixel_cross_entropy_forward, PixelCrossEntropyArgs, "pixel_cross_entropy")
OOMLAB_KERNEL_TABLE(pixel_cross_entropy_backward, PixelCrossEntropyArgs, "pixel_cross_entropy_backward")

}  // namespace oomlab
