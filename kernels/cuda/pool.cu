// pool.cu — CUDA max/avg/adaptive-avg pool2d forward/backward (float32, float64, float16,
// bfloat16) with the semantics of kernels/cpu/pool_cpu.cpp (batch norm: batchnorm.cu).
// Max takes the first maximum in row-major window order (NaN propagates; the last NaN
// wins, as the CPU kernel's compare), indices flat h*W+w. Avg sums in double and divides by
// the padded extent (count_include_pad); adaptive bins [floor(i*H/P), ceil((i+1)*H/P)).
// channels_last (NHWC) buffers: the same per-element arithmetic, indexed through locate().
// Backward kernels gather per input element over the outputs whose window holds it, in
// row-major output order — the order in which the CPU kernels scatter — so dx is
// overwritten without atomics and float/double results match the CPU.
#include <cmath>

#include "kernels/pool.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/dense_common.cuh"
#include "kernels/cuda/pool_math.cuh"

namespace oomlab {
namespace {
using cuda::dense::kBlock;
using cuda::dense::Num;
namespace dense = cuda::dense;

namespace pm = pool_math;
using pm::PoolDims;
using pm::pool_dims;

// The grid-stride kernels over pool_math.cuh's per-element bodies.
template <class T> struct PoolIO {
  using C = typename Num<T>::C;
  __device__ static C to(T v) { return Num<T>::to(v); }
  __device__ static T from(C v) { return Num<T>::from(v); }
};

template <class T> __global__ void max_pool_forward_kernel(const T* x, T* y, int64_t* idx, PoolDims d, int64_t n) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x)
    pm::max_forward_at<PoolIO<T>>(o, x, y, idx, d);
}
template <class T>
__global__ void max_pool_backward_kernel(const T* dy, const int64_t* idx, T* dx, PoolDims d, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x)
    pm::max_backward_at<PoolIO<T>>(e, dy, idx, dx, d);
}
template <class T> __global__ void avg_pool_forward_kernel(const T* x, T* y, PoolDims d, int64_t n) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x)
    pm::avg_forward_at<PoolIO<T>>(o, x, y, d);
}
template <class T> __global__ void avg_pool_backward_kernel(const T* dy, T* dx, PoolDims d, int64_t n) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x)
    pm::avg_backward_at<PoolIO<T>>(e, dy, dx, d);
}

template <class T> void max_pool2d_forward_cuda(const Pool2dArgs& a) {
  const int64_t n = a.N * a.C * a.P * a.Q;
  if (n == 0) return;
  const int dev = cuda::kernel_device("max_pool2d");
  cuda::DeviceGuard guard(dev);
  max_pool_forward_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), a.indices, pool_dims(a), n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void max_pool2d_backward_cuda(const Pool2dArgs& a) {
  const int64_t n = a.N * a.C * a.H * a.W;
  if (n == 0) return;
  OOMLAB_ASSERT(a.indices != nullptr && !a.adaptive);
  const int dev = cuda::kernel_device("max_pool2d_backward");
  cuda::DeviceGuard guard(dev);
  max_pool_backward_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<const T*>(a.dy), a.indices, static_cast<T*>(a.dx), pool_dims(a), n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void avg_pool2d_forward_cuda(const Pool2dArgs& a) {
  const int64_t n = a.N * a.C * a.P * a.Q;
  if (n == 0) return;
  const int dev = cuda::kernel_device("avg_pool2d");
  cuda::DeviceGuard guard(dev);
  avg_pool_forward_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), pool_dims(a), n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void avg_pool2d_backward_cuda(const Pool2dArgs& a) {
  const int64_t n = a.N * a.C * a.H * a.W;
  if (n == 0) return;
  const int dev = cuda::kernel_device("avg_pool2d_backward");
  cuda::DeviceGuard guard(dev);
  avg_pool_backward_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<const T*>(a.dy), static_cast<T*>(a.dx), pool_dims(a), n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void set_pool(DType t) {
  set_kernel<&max_pool2d_forward_cuda<T>>(max_pool2d_forward_kernels(), DeviceType::cuda, t);
  set_kernel<&max_pool2d_backward_cuda<T>>(max_pool2d_backward_kernels(), DeviceType::cuda, t);
  set_kernel<&avg_pool2d_forward_cuda<T>>(avg_pool2d_forward_kernels(), DeviceType::cuda, t);
  set_kernel<&avg_pool2d_backward_cuda<T>>(avg_pool2d_backward_kernels(), DeviceType::cuda, t);
}
}  // namespace

void register_pool_cuda_kernels() {
  set_pool<float>(DType::f32);
  set_pool<double>(DType::f64);
  set_pool<__half>(DType::f16);
  set_pool<__nv_bfloat16>(DType::bf16);
}

}  // namespace oomlab
