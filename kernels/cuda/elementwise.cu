// elementwise.cu — CUDA kernels for axpby / mul / fill (f32, f64) and contiguous copies.
// Grid-stride loops on the default stream; checked against the CPU kernels by the
// parity tests (tests/test_cuda_parity.cpp, skipped without a GPU).
#include "engine/ops/copy.h"
#include "engine/ops/elementwise.h"
#include "kernels/cuda/cuda_check.h"

namespace oomlab {
namespace {
template <class T> __global__ void axpby_kernel(T* out, const T* a, const T* b, T alpha, T beta, T gamma, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = alpha * a[i] + (b ? beta * b[i] : T(0)) + gamma;
}
template <class T> __global__ void mul_kernel(T* out, const T* a, const T* b, T alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = a[i] * b[i] * alpha;
}
template <class T> __global__ void fill_kernel(T* out, T v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = v;
}
inline int blocks_for(int64_t n) { return int(std::min<int64_t>((n + 255) / 256, 65535)); }

template <class T> void axpby_cuda(const AxpbyArgs& a) {
  if (a.n == 0) return;
  axpby_kernel<T><<<blocks_for(a.n), 256>>>(static_cast<T*>(a.out), static_cast<const T*>(a.a),
                                            static_cast<const T*>(a.b), T(a.alpha), T(a.beta), T(a.gamma), a.n);
  CUDA_LAUNCH_CHECK();
}
template <class T> void mul_cuda(const MulArgs& a) {
  if (a.n == 0) return;
  mul_kernel<T><<<blocks_for(a.n), 256>>>(static_cast<T*>(a.out), static_cast<const T*>(a.a),
                                          static_cast<const T*>(a.b), T(a.alpha), a.n);
  CUDA_LAUNCH_CHECK();
}
template <class T> void fill_cuda(const FillArgs& a) {
  if (a.n == 0) return;
  fill_kernel<T><<<blocks_for(a.n), 256>>>(static_cast<T*>(a.out), T(a.value), a.n);
  CUDA_LAUNCH_CHECK();
}

// Contiguous same-dtype copies between any two memories (host or device) via UVA.
void copy_cuda(const CopyArgs& a) {
  int64_t n = 1, acc = 1;
  bool contig = true;
  for (int d = a.ndim - 1; d >= 0; --d) {
    if (a.shape[d] != 1 && (a.in_strides[d] != acc || a.out_strides[d] != acc)) contig = false;
    acc *= a.shape[d];
  }
  n = acc;
  if (!contig || a.in_dtype != a.out_dtype)
    throw NotImplementedError("op 'copy' has no cuda kernel for strided or converting copies yet");
  CUDA_CHECK(cudaMemcpy(a.out, a.in, size_t(n) * dtype_size(a.in_dtype), cudaMemcpyDefault));
}
}  // namespace

void register_elementwise_cuda_kernels() {
  axpby_kernels().set(DeviceType::cuda, DType::f32, &axpby_cuda<float>);
  axpby_kernels().set(DeviceType::cuda, DType::f64, &axpby_cuda<double>);
  mul_kernels().set(DeviceType::cuda, DType::f32, &mul_cuda<float>);
  mul_kernels().set(DeviceType::cuda, DType::f64, &mul_cuda<double>);
  fill_kernels().set(DeviceType::cuda, DType::f32, &fill_cuda<float>);
  fill_kernels().set(DeviceType::cuda, DType::f64, &fill_cuda<double>);
}

void register_copy_cuda_kernels() {
  for (int t = 0; t < kNumDTypes; ++t) copy_kernels().set(DeviceType::cuda, DType(t), &copy_cuda);
}

}  // namespace oomlab
