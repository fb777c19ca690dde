// groupnorm.h — kernel argument struct and tables of the groupnorm family
// (engine/ops/groupnorm.h): group_norm over x viewed as [N, C, HW] with G groups of C/G
// channels, forward and backward, contiguous buffers. Statistics and every sum in double,
// one group (or one channel, for dweight / dbias) per task in a fixed order: the result does
// not depend on the thread count. CPU kernels: kernels/cpu/groupnorm_cpu.cpp; CUDA:
// kernels/cuda/groupnorm.cu.
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

// Per (n, g): mean, rstd ([N, G]; x's dtype, float32 for 16-bit x) over the group's
// (C/G)*HW values (biased variance), y = (x - mean) * rstd * weight[c] + bias[c]; weight /
// bias may be null (1 / 0). Backward: dx, dweight, dbias (each may be null; overwritten)
// from x, weight, mean, rstd, dy.
struct GroupNormArgs {
  const void* x; const void* weight; const void* bias; void* y; void* mean; void* rstd;
  const void* dy; void* dx; void* dweight; void* dbias;
  int64_t N, C, HW, G; double eps;
};

OOMLAB_KERNEL_TABLE(group_norm_forward, GroupNormArgs, "group_norm")
OOMLAB_KERNEL_TABLE(group_norm_backward, GroupNormArgs, "group_norm_backward")

}  // namespace oomlab
