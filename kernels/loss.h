// loss.h — kernel argument structs and tables of the loss family (engine/ops/loss.h):
// nll_loss over [N, C] log-probabilities and pixel_cross_entropy over NCHW logits,
// forward and backward, mean over the targets that are not ignore_index (count 0 ->
// NaN, as PyTorch). dloss is read on the device; backward kernels overwrite their
// output. count_correct: training accuracy's count of rows whose argmax is the target.
// CPU kernels: kernels/cpu/loss_cpu.cpp; CUDA: kernels/cuda/loss.cu.
#pragma once
#include <cmath>
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

// count_correct: the rows i of logits [N, C] (element (i, j) at i*s0 + j*s1) whose
// torch.argmax (the first maximal index; NaN counts as the maximum) equals target[i*ts];
// the count goes to *correct, host memory, when the kernel returns. The CUDA kernel takes
// contiguous logits and target (s1 = 1, s0 = C, ts = 1).
struct CountCorrectArgs {
  const void* logits; const int64_t* target; int64_t N, C, s0, s1, ts; int64_t* correct;
};

// The rule on host data, shared by the CPU kernel and the CUDA kernel's host path:
// value(k) is element k of the logits as a double.
template <class Value>
int64_t count_correct_rows(int64_t N, int64_t C, int64_t s0, int64_t s1, const int64_t* target, int64_t ts,
                           Value value) {
  int64_t correct = 0;
  for (int64_t i = 0; i < N && C > 0; ++i) {
    int64_t best = 0;
    double bv = value(i * s0);
    for (int64_t j = 1; j < C && !std::isnan(bv); ++j) {
      const double v = value(i * s0 + j * s1);
      if (v > bv || std::isnan(v)) { bv = v; best = j; }
    }
    if (best == target[i * ts]) ++correct;
  }
  return correct;
}

OOMLAB_KERNEL_TABLE(nll_forward, NllArgs, "nll_loss")
OOMLAB_KERNEL_TABLE(nll_backward, NllArgs, "nll_loss_backward")
OOMLAB_KERNEL_TABLE(pixel_cross_entropy_forward, PixelCrossEntropyArgs, "pixel_cross_entropy")
OOMLAB_KERNEL_TABLE(pixel_cross_entropy_backward, PixelCrossEntropyArgs, "pixel_cross_entropy_backward")
OOMLAB_KERNEL_TABLE(count_correct, CountCorrectArgs, "count_correct")

}  // namespace oomlab
