// block_ctx.cuh — DeviceCtx, the GPU's executor of kernel bodies written for an executor
// context (attention_flash.cuh, attention_tiled.cuh): tid() / bx() / by() are threadIdx.x /
// blockIdx.x / blockIdx.y, sync() is __syncthreads(), group_max / group_sum reduce over the 8
// lanes tid & ~7 .. + 7 with warp shuffles. The host emulation of a block
// (kernels/cuda/check/attention_kernels_check.cu) provides the same members, so CPU CI runs the
// bodies. Compiled for the host too (the members are then inert; only the GPU calls them).
#pragma once
#include <cstdint>

namespace oomlab::cuda {

#ifdef __CUDA_ARCH__
struct DeviceCtx {
  __device__ int tid() const { return int(threadIdx.x); }
  __device__ int64_t bx() const { return int64_t(blockIdx.x); }
  __device__ int64_t by() const { return int64_t(blockIdx.y); }
  __device__ void sync() const { __syncthreads(); }
  __device__ float group_sum(float v) const {
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
  }
  __device__ float group_max(float v) const {
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
  }
};
#else
struct DeviceCtx {   // the host pass over the kernels' source: declared, never run
  int tid() const { return 0; }
  int64_t bx() const { return 0; }
  int64_t by() const { return 0; }
  void sync() const {}
  float group_sum(float v) const { return v; }
  float group_max(float v) const { return v; }
};
#endif

}  // namespace oomlab::cuda
