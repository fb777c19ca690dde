// softmax_cpu.cpp — CPU kernels of the softmax family (kernels/softmax.h): softmax /
// log_softmax over the rows of [N, C] and the attention masked_softmax (scaled, padded keys
// at -inf), forward and backward, float32 and float64. Rows are independent (OpenMP over
// rows, static schedule); row sums accumulate in double over 8 fixed lanes (lane_sum,
// fast_math.h) and row maxima over 8 lanes in a fixed order, so results do not depend on
// the thread count. Max-shifted: y = exp(x - max) / sum, log_softmax = x - max - log(sum);
// a masked row whose every key is padded gives zeros. masked_softmax's float exps use
// exp_nonpos (exp_f32), softmax's std::exp.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/cpu/fast_math.h"
#include "kernels/softmax.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {
constexpr int64_t kParallelMin = 32768;   // elements below which a kernel stays serial

// ---- softmax / log_softmax ------------------------------------------------------------
// Row reductions over 8 fixed lanes (combined in lane order): vectorisable without
// fast-math, and the summation order depends only on C, never on threads.
template <class T> T row_max(const T* x, int64_t C) {
  T m[kLanes];
  for (int k = 0; k < kLanes; ++k) m[k] = x[0];
  int64_t j = 0;
  for (; j + kLanes <= C; j += kLanes)
    for (int k = 0; k < kLanes; ++k) m[k] = x[j + k] > m[k] ? x[j + k] : m[k];
  for (; j < C; ++j) m[0] = x[j] > m[0] ? x[j] : m[0];
  T r = m[0];
  for (int k = 1; k < kLanes; ++k) r = m[k] > r ? m[k] : r;
  return r;
}

template <class T> void softmax_forward_cpu(const SoftmaxArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int64_t N = a.N, C = a.C;
  if (C == 0) return;
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const T* xr = x + i * C;
    T* yr = y + i * C;
    const T mx = row_max(xr, C);
    if (a.log) {
      const double sum = lane_sum(C, [&](int64_t j) { return double(std::exp(xr[j] - mx)); });
      const T lse = T(std::log(sum));
      for (int64_t j = 0; j < C; ++j) yr[j] = xr[j] - mx - lse;
    } else {
      for (int64_t j = 0; j < C; ++j) yr[j] = std::exp(xr[j] - mx);
      const T inv = T(1.0 / lane_sum(C, [&](int64_t j) { return double(yr[j]); }));
      for (int64_t j = 0; j < C; ++j) yr[j] *= inv;
    }
  }
}

// softmax: dx = y * (dy - sum(dy * y)); log_softmax: dx = dy - exp(y) * sum(dy).
template <class T> void softmax_backward_cpu(const SoftmaxArgs& a) {
  const T* y = static_cast<const T*>(a.y);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
  const int64_t N = a.N, C = a.C;
#pragma omp parallel for schedule(static) if (N * C > kParallelMin)
  for (int64_t i = 0; i < N; ++i) {
    const T* yr = y + i * C;
    const T* gr = dy + i * C;
    T* dr = dx + i * C;
    if (a.log) {
      const T st = T(lane_sum(C, [&](int64_t j) { return double(gr[j]); }));
      for (int64_t j = 0; j < C; ++j) dr[j] = gr[j] - std::exp(yr[j]) * st;
    } else {
      const T st = T(lane_sum(C, [&](int64_t j) { return double(gr[j]) * double(yr[j]); }));
      for (int64_t j = 0; j < C; ++j) dr[j] = yr[j] * (gr[j] - st);
    }
  }
}

// ---- masked_softmax -------------------------------------------------------------------
template <class T> void masked_softmax_forward_cpu(const MaskedSoftmaxArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int64_t C = a.C;
  const T sc = T(a.scale);
  if (C == 0 || a.rows == 0) return;
  // The uint8 mask widened once per batch row to all-ones / all-zeros bit masks as wide as
  // T (so the select below vectorises as bit operations), with kept-key counts.
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const Bits ninf = std::bit_cast<Bits>(T(-INFINITY));
  const int64_t nb = a.mask ? (a.rows + a.rows_per_batch - 1) / a.rows_per_batch : 0;
  std::vector<Bits> keep(size_t(nb * C));
  std::vector<int64_t> kept(size_t(nb), 0);
  for (int64_t i = 0; i < nb * C; ++i) {
    keep[size_t(i)] = a.mask[i] ? Bits(0) : ~Bits(0);
    kept[size_t(i / C)] += a.mask[i] == 0;
  }
#pragma omp parallel for schedule(static) if (a.rows * C > kParallelMin)
  for (int64_t r = 0; r < a.rows; ++r) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    const int64_t b = a.mask ? r / a.rows_per_batch : 0;
    const Bits* kr = a.mask ? keep.data() + b * C : nullptr;
    // causal: the keys after this row's query are zeros, the softmax runs over the first n
    const int64_t n = a.causal_tq > 0 ? std::min(C, r % a.causal_tq + 1) : C;
    std::fill(yr + n, yr + C, T(0));
    bool none_kept = a.mask && kept[size_t(b)] == 0;
    if (a.mask && !none_kept && n < C)
      none_kept = std::all_of(a.mask + b * C, a.mask + b * C + n, [](uint8_t m) { return m != 0; });
    if (none_kept) {   // every visible key padded: zeros (not NaN)
      std::memset(static_cast<void*>(yr), 0, size_t(C) * sizeof(T));
      continue;
    }
    // scores (padded keys at -inf) into y, then max, shift, exp (exp(-inf) = 0), normalise.
    // A NaN need not win the max: it makes the row sum, hence the row, NaN.
    if (kr) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j)
        yr[j] = std::bit_cast<T>((std::bit_cast<Bits>(sc * xr[j]) & kr[j]) | (ninf & ~kr[j]));
    } else {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) yr[j] = sc * xr[j];
    }
    T mx = T(-INFINITY);
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < n; ++j) mx = yr[j] > mx ? yr[j] : mx;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) yr[j] -= mx;
    exp_nonpos(yr, n);
    const T inv = T(1.0 / lane_sum(n, [&](int64_t j) { return yr[j]; }));
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) yr[j] *= inv;
  }
}

template <class T> void masked_softmax_backward_cpu(const MaskedSoftmaxArgs& a) {
  const T* y = static_cast<const T*>(a.y);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
  const int64_t C = a.C;
  const T sc = T(a.scale);
#pragma omp parallel for schedule(static) if (a.rows * C > kParallelMin)
  for (int64_t r = 0; r < a.rows; ++r) {
    const T* yr = y + r * C;
    const T* gr = dy + r * C;
    T* dr = dx + r * C;
    const T s = T(lane_sum(C, [&](int64_t j) { return double(gr[j]) * double(yr[j]); }));
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) dr[j] = sc * yr[j] * (gr[j] - s);   // masked: y = 0 -> 0
  }
}
// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
template <DType H, bool Backward> void softmax_half(const SoftmaxArgs& a) {
  Widen<H> w;
  SoftmaxArgs f = a;
  const int64_t n = a.N * a.C;
  if (!Backward) { f.x = w.in(a.x, n); f.y = w.out(a.y, n); run_f32(softmax_forward_kernels(), f);
  } else {
    f.y = const_cast<float*>(w.in(a.y, n));
    f.dy = w.in(a.dy, n);
    f.dx = w.out(a.dx, n);
    run_f32(softmax_backward_kernels(), f);
  }
  w.narrow();
}
template <DType H, bool Backward> void masked_softmax_half(const MaskedSoftmaxArgs& a) {
  Widen<H> w;
  MaskedSoftmaxArgs f = a;
  const int64_t n = a.rows * a.C;
  if (!Backward) { f.x = w.in(a.x, n); f.y = w.out(a.y, n); run_f32(masked_softmax_forward_kernels(), f);
  } else {
    f.y = const_cast<float*>(w.in(a.y, n));
    f.dy = w.in(a.dy, n);
    f.dx = w.out(a.dx, n);
    run_f32(masked_softmax_backward_kernels(), f);
  }
  w.narrow();
}

template <DType H> void register_softmax_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&softmax_half<H, false>>(softmax_forward_kernels(), cpu, H);
  set_kernel<&softmax_half<H, true>>(softmax_backward_kernels(), cpu, H);
  set_kernel<&masked_softmax_half<H, false>>(masked_softmax_forward_kernels(), cpu, H);
  set_kernel<&masked_softmax_half<H, true>>(masked_softmax_backward_kernels(), cpu, H);
}
}  // namespace

void register_softmax_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(softmax_forward_kernels(), softmax_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(softmax_backward_kernels(), softmax_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(masked_softmax_forward_kernels(), masked_softmax_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(masked_softmax_backward_kernels(), masked_softmax_backward_cpu);
  register_softmax_half<DType::f16>();
  register_softmax_half<DType::bf16>();
}

}  // namespace oomlab
