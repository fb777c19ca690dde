// launch_utils.cuh — shared helpers for the pointwise CUDA kernels (kernels/cuda/*.cu):
//   * Launch: the thread's current (logical) cuda device made current, and its compute stream;
//   * grid sizing for grid-stride loops, block_sum (fixed-order block reduction);
//   * storage-type traits (float, double, __half, __nv_bfloat16 -> compute type float or
//     double), ld / st conversions that round as engine/core/dtype.h does (nearest even;
//     NaN written as the CPU converters write it);
//   * arithmetic with explicit rounding (fma_rn, mul_rn, add_rn, ..., add_prod): nvcc
//     contracts a*b+c into FMAs on its own and GCC (x86-64-v3, gnu++20) does so in the CPU
//     kernels, so formulas that must equal the CPU's bit for bit spell out every fusion;
//     host versions exist so they can be checked on a CPU-only machine
//     (kernels/cuda/check/formula_check.cu);
//   * exp_f32 (kernels/cpu/fast_math.h with GCC's fusions), exp_libm, Philox4x32-10 (rng.h);
//   * OOMLAB_REGISTER_FLOAT_CUDA / OOMLAB_REGISTER_FLOAT_HALF_CUDA registration macros.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "engine/core/dispatch.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_stream.h"

namespace oomlab::cuda {

// Where a kernel runs: the thread's current (logical) device, set by kernel dispatch, made
// current for the scope, and that device's compute stream (cuda_stream.h).
struct Launch {
  int dev;
  DeviceGuard guard;
  cudaStream_t stream;
  explicit Launch(const char* op) : dev(kernel_device(op)), guard(dev), stream(compute_stream(dev)) {}
};

constexpr int kThreads = 256;
// Blocks for a grid-stride loop over n items (kernels loop, so the cap only bounds the grid).
inline int grid_for(int64_t n, int threads = kThreads) {
  return int(std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, 65535 * 4)));
}
// Grid-stride loop index helpers.
__device__ __forceinline__ int64_t gtid() { return blockIdx.x * int64_t(blockDim.x) + threadIdx.x; }
__device__ __forceinline__ int64_t gstride() { return int64_t(gridDim.x) * blockDim.x; }

// Sum of v over a block (blockDim.x a multiple of 32): warp trees, then warps in order by
// thread 0. Deterministic for a given blockDim; the result is valid in thread 0 only.
template <class V> __device__ __forceinline__ V block_sum(V v) {
  __shared__ V warp_part[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) warp_part[threadIdx.x >> 5] = v;
  __syncthreads();
  V r = V(0);
  if (threadIdx.x == 0)
    for (int w = 0; w < int(blockDim.x >> 5); ++w) r += warp_part[w];
  __syncthreads();
  return r;
}

// ---- storage types --------------------------------------------------------------------
template <class T> struct Num;
template <> struct Num<float> { using C = float; };
template <> struct Num<double> { using C = double; };
template <> struct Num<__half> { using C = float; };
template <> struct Num<__nv_bfloat16> { using C = float; };
template <class T> using compute_t = typename Num<T>::C;  // arithmetic type of storage T

__device__ __forceinline__ float ld(float v) { return v; }
__device__ __forceinline__ double ld(double v) { return v; }
__device__ __forceinline__ float ld(__half v) { return __half2float(v); }
__device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }

// float -> half / bfloat16 exactly as float_to_half / float_to_bf16 (dtype.h): round to
// nearest even; NaN -> sign|0x7e00 (half) or the quieted top half (bfloat16).
__device__ __forceinline__ __half f32_to_f16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __ushort_as_half((unsigned short)(((u >> 16) & 0x8000u) | 0x7e00u));
  return __float2half_rn(f);
}
__device__ __forceinline__ __nv_bfloat16 f32_to_bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __ushort_as_bfloat16((unsigned short)((u >> 16) | 0x40u));
  return __float2bfloat16_rn(f);
}
template <class T> __device__ __forceinline__ T st(compute_t<T> v);
template <> __device__ __forceinline__ float st<float>(float v) { return v; }
template <> __device__ __forceinline__ double st<double>(double v) { return v; }
template <> __device__ __forceinline__ __half st<__half>(float v) { return f32_to_f16(v); }
template <> __device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) { return f32_to_bf16(v); }

// ld / st as an IO<T> type, for kernel bodies written for two executors (the GPU's and a
// host twin's IO, whose ld / st are plain float / double): IO::C, IO::ld, IO::st.
template <class T> struct DeviceIO {
  using C = compute_t<T>;
  __device__ static C ld(T v) { return cuda::ld(v); }
  __device__ static T st(C v) { return cuda::st<T>(v); }
};

// ---- explicitly rounded arithmetic (never contracted) ---------------------------------
#ifdef __CUDA_ARCH__
__device__ __forceinline__ float fma_rn(float a, float b, float c) { return __fmaf_rn(a, b, c); }
__device__ __forceinline__ double fma_rn(double a, double b, double c) { return __fma_rn(a, b, c); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double sqrt_rn(double a) { return __dsqrt_rn(a); }
__device__ __forceinline__ int32_t f32_bits(float f) { return __float_as_int(f); }
__device__ __forceinline__ float bits_f32(int32_t i) { return __int_as_float(i); }
#else  // host versions (formula checks); the host compiler must not contract (-ffp-contract=off)
inline float fma_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
template <class T> inline T mul_rn(T a, T b) { return a * b; }
template <class T> inline T add_rn(T a, T b) { return a + b; }
template <class T> inline T sub_rn(T a, T b) { return a - b; }
template <class T> inline T div_rn(T a, T b) { return a / b; }
template <class T> inline T sqrt_rn(T a) { return std::sqrt(a); }
inline int32_t f32_bits(float f) {
  int32_t i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline float bits_f32(int32_t i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
#endif

// s + a * b with the product fused (one rounding) or rounded first (see row_lanes.cuh).
template <class C> __host__ __device__ __forceinline__ C add_prod(C s, C a, C b, bool fused) {
  return fused ? fma_rn(a, b, s) : add_rn(s, mul_rn(a, b));
}

// ---- exp ------------------------------------------------------------------------------
// exp_f32 of kernels/cpu/fast_math.h with the FMAs GCC forms there (t, r and the Horner
// steps are fused multiply-adds), so results are bit-identical to the CPU kernels.
__host__ __device__ __forceinline__ float exp_f32(float x) {
  const int32_t ix = f32_bits(x), mag = ix & INT32_MAX;
  const int32_t lim = ix < 0 ? 0x42D00000 : 0x42B20000;
  const int32_t cm = ((mag < lim) | (mag > 0x7f800000)) ? mag : lim;
  const float xc = bits_f32(cm | (ix & INT32_MIN));
  const float t = fma_rn(xc, 1.44269504f, 12582912.0f);
  const float n = sub_rn(t, 12582912.0f);
  const float r = fma_rn(n, 2.12194440e-4f, fma_rn(-n, 0.693359375f, xc));
  float p = 1.0f / 5040;
  p = fma_rn(p, r, 1.0f / 720);
  p = fma_rn(p, r, 1.0f / 120);
  p = fma_rn(p, r, 1.0f / 24);
  p = fma_rn(p, r, 1.0f / 6);
  p = fma_rn(p, r, 0.5f);
  p = fma_rn(p, r, 1.0f);
  p = fma_rn(p, r, 1.0f);
  const int32_t ni = f32_bits(t) - 0x4B400000, n1 = ni >> 1, n2 = ni - n1;
  return mul_rn(mul_rn(p, bits_f32((n1 + 127) << 23)), bits_f32((n2 + 127) << 23));
}
// The CPU kernels' exp for T: exp_f32 for float, libm exp for double.
__host__ __device__ __forceinline__ float exp_t(float x) { return exp_f32(x); }
__host__ __device__ __forceinline__ double exp_t(double x) { return exp(x); }
// glibc's expf / exp as the CPU's std::exp: float through double (correctly rounded in
// all but rare double-rounding cases; glibc's expf is within 0.502 ulp), double as is.
#ifdef __CUDA_ARCH__
__device__ __forceinline__ float exp_libm(float x) { return float(exp(double(x))); }
#else
inline float exp_libm(float x) { return std::exp(x); }
#endif
__host__ __device__ __forceinline__ double exp_libm(double x) { return exp(x); }

// ---- Philox4x32-10 (engine/core/rng.h) -----------------------------------------------
struct U4 {
  uint32_t w[4];
};
__host__ __device__ __forceinline__ U4 philox_block(uint64_t seed, uint64_t counter) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0u, c3 = 0u;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t(M0) * c0, p1 = uint64_t(M1) * c2;  // mul.wide.u32 on the GPU
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = uint32_t(p1);
    c2 = n2;
    c3 = uint32_t(p0);
    k0 += W0;
    k1 += W1;
  }
  return U4{{c0, c1, c2, c3}};
}

}  // namespace oomlab::cuda

// Register a kernel template for the float types on cuda (fn<float>, fn<double>), and in the
// _HALF form also for float16 / bfloat16 (fn<__half>, fn<__nv_bfloat16>).
#define OOMLAB_REGISTER_FLOAT_CUDA(table, fn)                                   \
  do {                                                                          \
    ::oomlab::set_kernel<&fn<float>>((table), ::oomlab::DeviceType::cuda, ::oomlab::DType::f32); \
    ::oomlab::set_kernel<&fn<double>>((table), ::oomlab::DeviceType::cuda, ::oomlab::DType::f64); \
  } while (0)
#define OOMLAB_REGISTER_FLOAT_HALF_CUDA(table, fn)                                      \
  do {                                                                                  \
    OOMLAB_REGISTER_FLOAT_CUDA(table, fn);                                              \
    ::oomlab::set_kernel<&fn<__half>>((table), ::oomlab::DeviceType::cuda, ::oomlab::DType::f16); \
    ::oomlab::set_kernel<&fn<__nv_bfloat16>>((table), ::oomlab::DeviceType::cuda, ::oomlab::DType::bf16); \
  } while (0)
