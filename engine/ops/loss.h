// loss.h — softmax, log_softmax (over the last dim of a 2-D [N, C] tensor, max-shifted
// for stability), nll_loss and cross_entropy = nll_loss(log_softmax(x)), mean reduction.
// Saved for backward: softmax and log_softmax save their output; nll_loss saves the
// int64 target [N]. Errors: target shape/dtype/range checked (ValueError names the bad
// class index). As PyTorch's default ignore_index, target -100 rows are skipped and the
// mean is over the remaining rows (all ignored -> NaN).
#pragma once
#include "engine/core/dispatch.h"
#include "engine/core/tensor.h"

namespace oomlab {

inline constexpr int64_t kNllIgnoreIndex = -100;   // PyTorch's default ignore_index

Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target);
Tensor cross_entropy(const Tensor& logits, const Tensor& target);
// Number of rows whose argmax equals target (host result; 0 on meta).
int64_t count_correct(const Tensor& logits, const Tensor& target);

// ---- kernels ---- (rows N, columns C)
struct SoftmaxArgs { const void* x; void* y; const void* dy; void* dx; int64_t N, C; bool log; };
// loss = -sum_{i: target[i] != ignore_index} logp[i, target[i]] / count (dloss read on device)
struct NllArgs {
  const void* logp; const int64_t* target; void* loss; const void* dloss; void* dlogp; int64_t N, C;
  int64_t ignore_index = kNllIgnoreIndex;
};
KernelTable<SoftmaxArgs>& softmax_forward_kernels();
KernelTable<SoftmaxArgs>& softmax_backward_kernels();
KernelTable<NllArgs>& nll_forward_kernels();
KernelTable<NllArgs>& nll_backward_kernels();

}  // namespace oomlab
