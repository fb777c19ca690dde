// fast_math.h — vectorisable float32 math and fixed-order row sums shared by the CPU
// kernels (glibc's expf is a scalar call that stops GCC from vectorising loops): exp_f32,
// exp_t (exp_f32 for float, std::exp for double), exp_nonpos (in-place exp of
// non-positive values), lane_sum (double sums over 8 fixed lanes: the order depends on
// the length only, never on threads). The CUDA twins (launch_utils.cuh, row_lanes.cuh)
// reproduce them bit for bit.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace oomlab {

// exp for float without calls or float selects, so loops vectorise under GCC's default
// -ftrapping-math (PyTorch's CPU kernels use a vectorised exp too): x clamped to
// [-104, 89] on its bits (NaN passes), x = n ln2 + r with |r| <= ln2/2 (Cody-Waite split
// of ln2), exp(r) by its Taylor series to r^7 (truncation < 1e-8 relative), 2^n applied
// as two normal powers of two so gradual underflow and overflow to inf come out right.
// Measured over all floats in [-104.5, 89.5]: <= 1 ulp. double keeps std::exp.
inline float exp_f32(float x) {
  const int32_t ix = std::bit_cast<int32_t>(x), mag = ix & INT32_MAX;
  const int32_t lim = ix < 0 ? 0x42D00000 : 0x42B20000;               // |x| <= 104 (x < 0), 89 (x >= 0)
  const int32_t cm = ((mag < lim) | (mag > 0x7f800000)) ? mag : lim;   // NaN passes unchanged
  const float xc = std::bit_cast<float>(cm | (ix & INT32_MIN));
  const float t = xc * 1.44269504f + 12582912.0f;   // + 1.5 * 2^23 rounds to an integer
  const float n = t - 12582912.0f;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t ni = std::bit_cast<int32_t>(t) - 0x4B400000, n1 = ni >> 1, n2 = ni - n1;   // n in [-150, 128]
  return p * std::bit_cast<float>((n1 + 127) << 23) * std::bit_cast<float>((n2 + 127) << 23);
}

// exp in T: exp_f32 for float (vectorisable, <= 1 ulp), std::exp for double.
template <class T> inline T exp_t(T x) {
  if constexpr (std::is_same_v<T, float>) return exp_f32(x);
  else return std::exp(x);
}

// v[i] = exp(v[i]) in place, for v[i] <= 0 (NaN stays NaN; exp(-inf) = 0; float32
// flushes results below ~1e-38, i.e. v < -87.68, to 0).
template <class T> void exp_nonpos(T* v, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) { const float a = v[i]; v[i] = a < -88.0f ? -88.0f : a; }
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) v[i] = exp_f32(v[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) v[i] = std::exp(v[i]);
  }
}

// sum_{j < n} f(j) in double over 8 fixed lanes combined in lane order: vectorises
// (two independent 4-wide accumulators) and the order depends only on n, never threads.
inline constexpr int kLanes = 8;
template <class F> double lane_sum(int64_t n, F f) {
  double s[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) s[k] += double(f(j + k));
  for (; j < n; ++j) s[0] += double(f(j));
  double r = 0.0;
  for (int k = 0; k < kLanes; ++k) r += s[k];
  return r;
}

}  // namespace oomlab
