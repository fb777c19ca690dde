// batchnorm.h — kernel argument struct and tables of the batchnorm family
// (engine/ops/batchnorm.h): batch_norm forward (training: batch statistics, running-stat
// update; eval: running statistics) and backward, x viewed as [N, C, HW]. weight / bias /
// running / saved statistics share one dtype (the kernel's contract). CPU kernels:
// kernels/cpu/batchnorm_cpu.cpp; CUDA: kernels/cuda/batchnorm.cu.
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

struct BatchNormArgs {
  int64_t N, C, HW; double momentum, eps; bool training;
  const void* x; const void* weight; const void* bias; void* y;
  void* running_mean; void* running_var;       // updated by training forward
  void* save_mean; void* save_invstd;          // written by training forward; read by backward
  const void* dy; void* dx; void* dweight; void* dbias;   // backward (dx/dweight/dbias may be null)
  // BatchNorm + ReLU fused (issue 31): forward writes y = relu(batch_norm(x)) (NaN kept, as
  // torch.relu); backward reads y (the forward's output) and uses dy where y > 0 and 0
  // elsewhere (relu's backward) in place of dy. Bit-identical to batch_norm then relu.
  bool relu = false;
  // channels_last input (engine/ops/batchnorm.cpp): x is [N*H*W, C] rows, passed as N = N*H*W,
  // HW = 1; kernels may walk it row by row (same statistics, another summation order).
  bool channels_last = false;
};

OOMLAB_KERNEL_TABLE(batch_norm_forward, BatchNormArgs, "batch_norm")
OOMLAB_KERNEL_TABLE(batch_norm_backward, BatchNormArgs, "batch_norm_backward")

}  // namespace oomlab
