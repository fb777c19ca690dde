// optim.h — the optim family's kernels: fused per-parameter optimizer updates (raw
// pointers + n) behind engine/optim/sgd.cpp and adam.cpp.
// One launch updates one parameter and its state in a single pass, allocating nothing
// (like torch's fused=True): the only optimizer memory is the state itself. The optimizers
// launch a group's updates through the foreach tables below.
// Math is done in the parameter's dtype T with PyTorch's single-tensor operation order;
// host-side scalars (bias corrections, step size) are computed in double and passed in.
// CPU kernels: kernels/cpu/optim_cpu.cpp; CUDA: kernels/cuda/optim.cu. Elementwise only,
// so results never depend on the thread count.
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

// torch.optim.SGD for one parameter (g' = grad + weight_decay * param):
//   momentum == 0:     param -= lr * g'
//   first_step:        buf = g'                                   (clone of the grad)
//   otherwise:         buf = momentum * buf + (1 - dampening) * g'
//   d = nesterov ? g' + momentum * buf : buf;  param -= lr * d
// buf may be null iff momentum == 0.
struct SgdArgs {
  void* param; const void* grad; void* buf;
  double lr, momentum, dampening, weight_decay;
  bool nesterov, first_step;
  int64_t n;
};

// torch.optim.Adam / AdamW for one parameter at step t (t >= 1):
//   decoupled (AdamW): param *= 1 - lr * weight_decay;  g = grad
//   else       (Adam): g = grad + weight_decay * param
//   exp_avg    = lerp(exp_avg, g, 1 - beta1)
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
//   denom      = sqrt(exp_avg_sq) / bias_correction2_sqrt + eps
//   param     += -step_size * exp_avg / denom
// with step_size = lr / (1 - beta1^t), bias_correction2_sqrt = sqrt(1 - beta2^t).
struct AdamArgs {
  void* param; const void* grad; void* exp_avg; void* exp_avg_sq;
  double lr, beta1, beta2, eps, weight_decay;
  double step_size, bias_correction2_sqrt;
  bool decoupled;
  int64_t n;
};

// GradScaler's fused unscale + inf/NaN check (torch._amp_foreach_non_finite_check_and_unscale_)
// for one gradient: grad[i] *= inv_scale (computed in float32 for 16/32-bit grads, as
// PyTorch multiplies by a float32 inverse scale); *found_inf (float32 on the device) is set
// to 1 when any grad[i] is inf or NaN, and never reset here (one flag for all grads).
struct UnscaleArgs { void* grad; float* found_inf; double inv_scale; int64_t n; };

OOMLAB_KERNEL_TABLE(sgd, SgdArgs, "sgd_step")
OOMLAB_KERNEL_TABLE(amp_unscale, UnscaleArgs, "amp_unscale")
OOMLAB_KERNEL_TABLE(adam, AdamArgs, "adam_step")

// The updates of one parameter group (torch.optim's foreach form): `count` items of one
// dtype on one device, each as its single-parameter kernel defines it, in order. CPU: the
// single-parameter kernels one after another (foreach_per_item). CUDA: one launch per list of
// up to 24 tensors (kernels/cuda/optim_foreach.cu), bit-identical to the per-item kernels.
template <class Args> struct ForeachArgs {
  const Args* items;
  int64_t count;
  DType dtype;
};
using SgdForeachArgs = ForeachArgs<SgdArgs>;
using AdamForeachArgs = ForeachArgs<AdamArgs>;
OOMLAB_KERNEL_TABLE(sgd_foreach, SgdForeachArgs, "sgd_foreach")
OOMLAB_KERNEL_TABLE(adam_foreach, AdamForeachArgs, "adam_foreach")

// A foreach kernel as single-parameter launches of `table` on the launch's device.
template <class Args, KernelTable<Args>& (*Table)()> void foreach_per_item(const ForeachArgs<Args>& a) {
  for (int64_t i = 0; i < a.count; ++i) Table().launch(current_device(), a.dtype, a.items[i]);
}

}  // namespace oomlab
