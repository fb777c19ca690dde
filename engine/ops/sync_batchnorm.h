// sync_batchnorm.h — sync_batch_norm: batch_norm whose training statistics span every rank
// (torch.nn.SyncBatchNorm semantics); the communication is a caller-given all-reduce.
// Contracts:
//  * AllReduceSumFn sums a contiguous tensor in place across all ranks (blocking); every
//    rank calls sync_batch_norm in the same order, so the calls match.
//  * Eval: exactly batch_norm with the running stats (no communication, fn not needed).
//  * Training forward: ONE all_reduce_sum of [sum(x) | sum(x^2) | count] ([2C+1]; float32
//    for 16-bit/float32 inputs, float64 for float64), count = N*H*W of this rank (0 allowed)
//    -> global mean and biased var (sum-of-squares form, clamped at 0); y = (x - mean) *
//    invstd * w + b. Running stats: rm = (1-m) rm + m mean, rv = (1-m) rv + m var * n/(n-1)
//    with n the GLOBAL count, which must exceed 1 (read back to the host; on meta, where
//    no values exist, the local count stands in and the check is skipped).
//  * Backward (node "sync_batch_norm"): local sum(dy), sum(dy*xhat) -> grad_bias,
//    grad_weight of THIS rank (not reduced: DDP averages parameter grads later, as
//    PyTorch); when the input needs a gradient, ONE all_reduce_sum of [sum(dy) |
//    sum(dy*xhat)] ([2C]) and dx = w*invstd*(dy - mean(dy) - xhat*mean(dy*xhat)) with
//    global means (PyTorch's batch_norm_backward_elemt; sum(dy*xhat) = invstd*sum(dy*xmu)).
//  * Saved for backward: x, weight (if x needs grad), mean[C], var[C] (if x or weight
//    needs grad). Forward allocates [2C+1], a few [C] temporaries and y; backward [2C],
//    [C] temporaries, one x-sized temporary and dx. Runs on any device through the
//    batch_norm and elementwise kernels; on meta the same allocations and fn calls happen.
#pragma once
#include <functional>

#include "engine/core/tensor.h"

namespace oomlab {

using AllReduceSumFn = std::function<void(const Tensor&)>;

Tensor sync_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                       Tensor& running_var, bool training, double momentum, double eps,
                       const AllReduceSumFn& all_reduce_sum);

}  // namespace oomlab
