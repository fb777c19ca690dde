// elementwise.cu — CUDA kernels for axpby / mul / fill / sum / pow (kernels/elementwise.h) in
// float32, float64, float16 and bfloat16 (axpby also int64). Grid-stride loops on the device's compute stream;
// axpby and mul are maps of vector_map.cuh (16-byte accesses where aligned, same bits).
// float32 / float64 results equal the CPU kernels bit for bit (the same fused multiply-adds
// as GCC forms, pointwise_math.cuh); float16 / bfloat16 compute in float and round once.
// sum: one block, double partials per thread combined in a fixed tree — deterministic, and
// equal to the CPU's chunked double sum after rounding to the output type except in rare
// ties (float64 within an ulp or two). Copies live in copy.cu.
#include "kernels/elementwise.h"
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/cuda/vector_map.cuh"

namespace oomlab {
namespace {
using namespace cuda;

// Per-element ops (vector_map.cuh runs them scalar or 16 bytes at a time, same bits).
template <class T, class C = compute_t<T>> struct Axpby1 {   // alpha*a + gamma
  C alpha, gamma;
  __device__ T operator()(T a) const { return st<T>(axpby1(alpha, ld(a), gamma)); }
};
template <class T, class C = compute_t<T>> struct Axpby2 {   // alpha*a + beta*b + gamma
  C alpha, beta, gamma;
  __device__ T operator()(T a, T b) const { return st<T>(axpby2(alpha, ld(a), beta, ld(b), gamma)); }
};
template <class T, class C = compute_t<T>> struct Mul3 {   // a*b*alpha
  C alpha;
  __device__ T operator()(T a, T b) const { return st<T>(mul3(ld(a), ld(b), alpha)); }
};
template <class T, class C = compute_t<T>> struct PowFwd {
  C e;
  __device__ T operator()(T x) const { return st<T>(pow(ld(x), e)); }
};
template <class T, class C = compute_t<T>> struct PowBwd {   // (x, dy) -> dx
  C e;
  __device__ T operator()(T x, T dy) const {
    return e == C(0) ? st<T>(0) : st<T>(mul_rn(ld(dy), mul_rn(e, pow(ld(x), sub_rn(e, C(1))))));
  }
};
__global__ void axpby_i64_kernel(int64_t* out, const int64_t* a, const int64_t* b, int64_t alpha, int64_t beta,
                                 int64_t gamma, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) out[i] = alpha * a[i] + (b ? beta * b[i] : 0) + gamma;
}
template <class U> __global__ void fill_kernel(U* out, U v, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) out[i] = v;
}
template <class T> __global__ void sum_kernel(T* out, const T* a, double alpha, int64_t n) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += double(ld(a[i]));
  const double total = block_sum(s);
  if (threadIdx.x == 0) *out = st<T>(compute_t<T>(total * alpha));
}

template <class T> void axpby_cuda(const AxpbyArgs& a) {
  if (a.n == 0) return;
  using C = compute_t<T>;
  T* out = static_cast<T*>(a.out);
  const T* x = static_cast<const T*>(a.a);
  const T* y = static_cast<const T*>(a.b);
  if (y)
    map2(Launch("axpby"), out, x, y, a.n, Axpby2<T>{C(a.alpha), C(a.beta), C(a.gamma)});
  else
    map1(Launch("axpby"), out, x, a.n, Axpby1<T>{C(a.alpha), C(a.gamma)});
}
// int64 (counters such as BatchNorm's num_batches_tracked): integer arithmetic, as the CPU's.
void axpby_i64_cuda(const AxpbyArgs& a) {
  if (a.n == 0) return;
  const Launch L("axpby");
  axpby_i64_kernel<<<grid_for(a.n), kThreads, 0, L.stream>>>(
      static_cast<int64_t*>(a.out), static_cast<const int64_t*>(a.a), static_cast<const int64_t*>(a.b),
      int64_t(a.alpha), int64_t(a.beta), int64_t(a.gamma), a.n);
  CUDA_LAUNCH_CHECK();
}
template <class T> void mul_cuda(const MulArgs& a) {
  if (a.n == 0) return;
  map2(Launch("mul"), static_cast<T*>(a.out), static_cast<const T*>(a.a), static_cast<const T*>(a.b), a.n,
       Mul3<T>{compute_t<T>(a.alpha)});
}
template <class T> void pow_forward_cuda(const PowArgs& a) {
  if (a.n == 0) return;
  map1(Launch("pow"), static_cast<T*>(a.y), static_cast<const T*>(a.x), a.n, PowFwd<T>{compute_t<T>(a.exponent)});
}
template <class T> void pow_backward_cuda(const PowArgs& a) {
  if (a.n == 0) return;
  map2(Launch("pow_backward"), static_cast<T*>(a.dx), static_cast<const T*>(a.x), static_cast<const T*>(a.dy), a.n,
       PowBwd<T>{compute_t<T>(a.exponent)});
}
// The value is converted on the host exactly as the CPU fill (half: float_to_half(float(v))).
template <class T> void fill_cuda(const FillArgs& a) {
  if (a.n == 0) return;
  const Launch L("fill");
  if constexpr (sizeof(T) == 2) {
    const uint16_t bits = std::is_same_v<T, __half> ? float_to_half(float(a.value)) : float_to_bf16(float(a.value));
    fill_kernel<uint16_t><<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<uint16_t*>(a.out), bits, a.n);
  } else {
    fill_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<T*>(a.out), T(a.value), a.n);
  }
  CUDA_LAUNCH_CHECK();
}
template <class T> void sum_cuda(const SumArgs& a) {
  const Launch L("sum");
  sum_kernel<T><<<1, 1024, 0, L.stream>>>(static_cast<T*>(a.out), static_cast<const T*>(a.a), a.alpha, a.n);
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_elementwise_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(axpby_kernels(), axpby_cuda);
  set_kernel<&axpby_i64_cuda>(axpby_kernels(), DeviceType::cuda, DType::i64);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(mul_kernels(), mul_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(pow_forward_kernels(), pow_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(pow_backward_kernels(), pow_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(fill_kernels(), fill_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(sum_kernels(), sum_cuda);
}

}  // namespace oomlab
