// batchnorm.h — batch_norm over NCHW (per channel C; also [N, C] inputs), as
// torch.nn.functional.batch_norm.
// Training: normalizes with the biased batch variance, updates running_mean/var in
// place with momentum (running_var uses the unbiased variance); eval: uses the running
// stats. Saved for backward (training): x, weight, save_mean[C], save_invstd[C] (fp32
// or the input's dtype for f64); eval: x and weight (and views of running_mean/var, no
// copies). Running stats are not modified by backward.
#pragma once
#include "engine/core/dispatch.h"
#include "engine/core/tensor.h"

namespace oomlab {

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  Tensor& running_mean, Tensor& running_var, bool training,
                  double momentum = 0.1, double eps = 1e-5);

// ---- kernels ---- (x viewed as [N, C, HW])
struct BatchNormArgs {
  int64_t N, C, HW; double momentum, eps; bool training;
  const void* x; const void* weight; const void* bias; void* y;
  void* running_mean; void* running_var;       // updated by training forward
  void* save_mean; void* save_invstd;          // written by training forward; read by backward
  const void* dy; void* dx; void* dweight; void* dbias;   // backward (dx/dweight/dbias may be null)
};
KernelTable<BatchNormArgs>& batch_norm_forward_kernels();
KernelTable<BatchNormArgs>& batch_norm_backward_kernels();

}  // namespace oomlab
