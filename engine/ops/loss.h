// loss.h — nll_loss and cross_entropy = nll_loss(log_softmax(x)) over [N, C] (mean
// reduction), pixel_cross_entropy(logits [N, C, H, W], target int64 [N, H, W]) -> scalar
// mean over pixels (= nll over log_softmax along C), as torch.nn.functional, and
// count_correct.
// As PyTorch's default ignore_index, targets kNllIgnoreIndex (-100) are skipped and the
// mean is over the rest (all ignored -> NaN). Saved for backward: nll_loss saves the
// int64 target; pixel_cross_entropy the log-probabilities and the target. Errors: target
// shape / dtype / range checked (ValueError names the bad class index). Kernels:
// kernels/loss.h (which defines kNllIgnoreIndex).
#pragma once
#include "engine/core/tensor.h"
#include "kernels/loss.h"   // kNllIgnoreIndex

namespace oomlab {

Tensor nll_loss(const Tensor& log_probs, const Tensor& target);
Tensor cross_entropy(const Tensor& logits, const Tensor& target);
Tensor pixel_cross_entropy(const Tensor& logits, const Tensor& target);
// Number of rows whose argmax equals target (host result; 0 on meta).
int64_t count_correct(const Tensor& logits, const Tensor& target);

}  // namespace oomlab
