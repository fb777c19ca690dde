// pool.h — kernel argument struct and tables of the pool family (engine/ops/pool.h):
// max_pool2d, avg_pool2d and adaptive_avg_pool2d (the avg tables with `adaptive`), forward
// and backward, on contiguous NCHW buffers, or NHWC ones with `channels_last` (x, y, the
// indices, dy and dx all so; an index is still flat h*W+w within its channel's plane);
// backward kernels overwrite dx. CPU kernels:
// kernels/cpu/pool_cpu.cpp; CUDA: kernels/cuda/pool.cu.
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

struct Pool2dParams { int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h = 0, pad_w = 0; };

struct Pool2dArgs {
  int64_t N, C, H, W, P, Q;
  Pool2dParams p;
  bool adaptive;                    // avg: adaptive bins (PyTorch's start/end formula)
  bool channels_last = false;       // NHWC buffers (--channels-last)
  const void* x; void* y; int64_t* indices;   // forward (indices: max only; flat h*W+w)
  const void* dy; void* dx;                   // backward (dx overwritten)
};

OOMLAB_KERNEL_TABLE(max_pool2d_forward, Pool2dArgs, "max_pool2d")
OOMLAB_KERNEL_TABLE(max_pool2d_backward, Pool2dArgs, "max_pool2d_backward")
OOMLAB_KERNEL_TABLE(avg_pool2d_forward, Pool2dArgs, "avg_pool2d")
OOMLAB_KERNEL_TABLE(avg_pool2d_backward, Pool2dArgs, "avg_pool2d_backward")

}  // namespace oomlab
