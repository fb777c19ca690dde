// activation.cu — CUDA kernels of the activation family (kernels/activation.h): relu /
// relu backward (relu_ is relu with x == y), sigmoid and gelu (erf and tanh forms),
// forward and backward, in float32, float64, float16 and bfloat16 (half types compute in
// float, one rounding at the store). Parity with kernels/cpu/activation_cpu.cpp: relu is
// bit-identical; sigmoid and gelu are bit-identical in float32 (the same exp_f32, the same
// Abramowitz & Stegun erf, the same fused multiply-adds — pointwise_math.cuh); float64
// uses the GPU's exp / erf (within an ulp or two of glibc's).
#include "kernels/activation.h"
#include "kernels/cuda/pointwise_math.cuh"

namespace oomlab {
namespace {
using namespace cuda;

// ---- relu -------------------------------------------------------------------------------
template <class T> __global__ void relu_fwd_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) {
    const T v = x[i];
    const compute_t<T> f = ld(v);
    y[i] = (f > 0 || f != f) ? v : st<T>(0);  // NaN propagates, as torch.relu
  }
}
template <class T> __global__ void relu_bwd_kernel(const T* y, const T* dy, T* dx, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) dx[i] = ld(y[i]) <= 0 ? st<T>(0) : dy[i];
}
template <class T> void relu_forward_cuda(const ReluArgs& a) {
  if (a.n == 0) return;
  const Launch L("relu");
  relu_fwd_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.n);
  CUDA_LAUNCH_CHECK();
}
template <class T> void relu_backward_cuda(const ReluArgs& a) {
  if (a.n == 0) return;
  const Launch L("relu_backward");
  relu_bwd_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<const T*>(a.y), static_cast<const T*>(a.dy),
                                                               static_cast<T*>(a.dx), a.n);
  CUDA_LAUNCH_CHECK();
}

// ---- sigmoid ------------------------------------------------------------------------------
template <class T> __global__ void sigmoid_fwd_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) y[i] = st<T>(sigmoid_fwd(ld(x[i])));
}
template <class T> __global__ void sigmoid_bwd_kernel(const T* y, const T* dy, T* dx, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) dx[i] = st<T>(sigmoid_bwd(ld(y[i]), ld(dy[i])));
}
template <class T> void sigmoid_forward_cuda(const SigmoidArgs& a) {
  if (a.n == 0) return;
  const Launch L("sigmoid");
  sigmoid_fwd_kernel<T>
      <<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.n);
  CUDA_LAUNCH_CHECK();
}
template <class T> void sigmoid_backward_cuda(const SigmoidArgs& a) {
  if (a.n == 0) return;
  const Launch L("sigmoid_backward");
  sigmoid_bwd_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.y), static_cast<const T*>(a.dy), static_cast<T*>(a.dx), a.n);
  CUDA_LAUNCH_CHECK();
}

// ---- gelu -------------------------------------------------------------------------------
template <class T> __global__ void gelu_fwd_kernel(const T* x, T* y, int64_t n, bool tanh_approx) {
  for (int64_t i = gtid(); i < n; i += gstride()) y[i] = st<T>(gelu_fwd(ld(x[i]), tanh_approx));
}
template <class T> __global__ void gelu_bwd_kernel(const T* x, const T* dy, T* dx, int64_t n, bool tanh_approx) {
  for (int64_t i = gtid(); i < n; i += gstride()) dx[i] = st<T>(gelu_bwd(ld(x[i]), ld(dy[i]), tanh_approx));
}
template <class T> void gelu_forward_cuda(const GeluArgs& a) {
  if (a.n == 0) return;
  const Launch L("gelu");
  gelu_fwd_kernel<T>
      <<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.n, a.tanh_approx);
  CUDA_LAUNCH_CHECK();
}
template <class T> void gelu_backward_cuda(const GeluArgs& a) {
  if (a.n == 0) return;
  const Launch L("gelu_backward");
  gelu_bwd_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<const T*>(a.x), static_cast<const T*>(a.dy),
                                                               static_cast<T*>(a.dx), a.n, a.tanh_approx);
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_activation_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(relu_forward_kernels(), relu_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(relu_backward_kernels(), relu_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(sigmoid_forward_kernels(), sigmoid_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(sigmoid_backward_kernels(), sigmoid_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(gelu_forward_kernels(), gelu_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(gelu_backward_kernels(), gelu_backward_cuda);
}

}  // namespace oomlab
