// batchnorm.h — batch_norm over NCHW (per channel C; also [N, C] inputs), as
// torch.nn.functional.batch_norm.
// Training: normalizes with the biased batch variance, updates running_mean/var in
// place with momentum (running_var uses the unbiased variance); eval: uses the running
// stats. Saved for backward (training): x, weight, save_mean[C], save_invstd[C] (fp32
// or the input's dtype for f64); eval: x and weight (and views of running_mean/var, no
// copies). Running stats are not modified by backward. Kernels: kernels/batchnorm.h.
#pragma once
#include "engine/core/tensor.h"

namespace oomlab {

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  Tensor& running_mean, Tensor& running_var, bool training,
                  double momentum = 0.1, double eps = 1e-5);

// relu(batch_norm(...)) in one op (fused kernels, bit-identical to the two ops): saves
// also its output (relu's mask), which relu would have saved; allocates no intermediate
// and, in backward, no relu gradient. Autograd node "batch_norm_relu".
Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       Tensor& running_mean, Tensor& running_var, bool training,
                       double momentum = 0.1, double eps = 1e-5);

}  // namespace oomlab
