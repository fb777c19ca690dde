// block_ctx.cuh — DeviceCtx, the GPU's executor of kernel bodies written for an executor
// context (attention_flash.cuh, attention_tiled.cuh): tid() / bx() / by() are threadIdx.x /
// blockIdx.x / blockIdx.y, sync() is __syncthreads(), group_max / group_sum reduce over the 8
// lanes tid & ~7 .. + 7 with warp shuffles. The host emulation of a block
// (kernels/cuda/check/attention_kernels_check.cu) provides the same members, so CPU CI runs the
// bodies. Compiled for the host too (the members are then inert; only the GPU calls them).
#pragma once
#include <cstdint>

namespace oomlab::cuda {

// The GPU's executor.
struct DeviceCtx {
  __host__ __device__ int tid() const {
#ifdef __CUDA_ARCH__
    return int(threadIdx.x);
#else
    return 0;
#endif
  }
  __host__ __device__ int64_t bx() const {
#ifdef __CUDA_ARCH__
    return int64_t(blockIdx.x);
#else
    return 0;
#endif
  }
  __host__ __device__ int64_t by() const {
#ifdef __CUDA_ARCH__
    return int64_t(blockIdx.y);
#else
    return 0;
#endif
  }
  __host__ __device__ void sync() const {
#ifdef __CUDA_ARCH__
    __syncthreads();
#endif
  }
  __host__ __device__ float group_sum(float v) const {
#ifdef __CUDA_ARCH__
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
#endif
    return v;
  }
  __host__ __device__ float group_max(float v) const {
#ifdef __CUDA_ARCH__
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
#endif
    return v;
  }
};

}  // namespace oomlab::cuda
