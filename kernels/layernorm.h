// layernorm.h — kernel argument struct and tables of the layernorm family
// (engine/ops/layernorm.h): layer_norm over the last dim, forward and backward, on
// contiguous row-major buffers. Deterministic (row sums over 8 fixed lanes, column sums in
// row order: the result does not depend on the thread count). CPU kernels:
// kernels/cpu/layernorm_cpu.cpp; CUDA: kernels/cuda/layernorm.cu.
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

// Over the last dim H of x [rows, H]: mean/rstd [rows] (x's dtype; float32 for f16/bf16 x),
// y = (x - mean) * rstd * weight + bias; weight / bias may be null (1 / 0). Backward: dx,
// dweight, dbias (each may be null = not wanted; overwritten) from x, weight, mean, rstd, dy.
struct LayerNormArgs {
  const void* x; const void* weight; const void* bias; void* y; void* mean; void* rstd;
  const void* dy; void* dx; void* dweight; void* dbias;
  int64_t rows, H; double eps;
};

OOMLAB_KERNEL_TABLE(layer_norm_forward, LayerNormArgs, "layer_norm")
OOMLAB_KERNEL_TABLE(layer_norm_backward, LayerNormArgs, "layer_norm_backward")

}  // namespace oomlab
