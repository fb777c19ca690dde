// layernorm_cpu.cpp — CPU kernels of the layernorm family (kernels/layernorm.h), float32
// and float64. Threading: OpenMP, static schedule. Row-wise work (normalisation, dx) runs
// over rows, row sums in double over 8 fixed lanes (lane_sum, fast_math.h); the dweight /
// dbias column reductions run over fixed 64-column blocks and add rows in row order, so
// no result depends on the thread count and there are no atomics.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/fast_math.h"
#include "kernels/layernorm.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {
constexpr int64_t kParallelMin = 32768;   // elements below which loops stay serial
constexpr int64_t kColBlock = 64;         // columns per task in column reductions

template <class T> void layer_norm_forward_cpu(const LayerNormArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  const T* b = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  T* mean = static_cast<T*>(a.mean);
  T* rstd = static_cast<T*>(a.rstd);
  const int64_t H = a.H;
#pragma omp parallel for schedule(static) if (a.rows * H > kParallelMin)
  for (int64_t r = 0; r < a.rows; ++r) {
    const T* xr = x + r * H;
    T* yr = y + r * H;
    const double mu = H > 0 ? lane_sum(H, [&](int64_t j) { return xr[j]; }) / double(H) : 0.0;
    const double var =
        H > 0 ? lane_sum(H, [&](int64_t j) { double d = double(xr[j]) - mu; return d * d; }) / double(H) : 0.0;
    const double rs = 1.0 / std::sqrt(var + a.eps);
    mean[r] = T(mu);
    rstd[r] = T(rs);
    const T m = T(mu), s = T(rs);
    for (int64_t j = 0; j < H; ++j) {
      T v = (xr[j] - m) * s;
      if (w) v *= w[j];
      if (b) v += b[j];
      yr[j] = v;
    }
  }
}

template <class T> void layer_norm_backward_cpu(const LayerNormArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  const T* mean = static_cast<const T*>(a.mean);
  const T* rstd = static_cast<const T*>(a.rstd);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
  T* dw = static_cast<T*>(a.dweight);
  T* db = static_cast<T*>(a.dbias);
  const int64_t H = a.H, rows = a.rows;
  if (dx) {
    // dx = rstd * (w*dy - mean(w*dy) - xhat * mean(w*dy * xhat))
#pragma omp parallel for schedule(static) if (rows * H > kParallelMin)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * H;
      const T* gr = dy + r * H;
      T* dr = dx + r * H;
      const T m = mean[r], s = rstd[r];
      if (w) {   // dr = w * dy first (the branch stays outside the loops)
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) dr[j] = gr[j] * w[j];
      } else {
        std::memcpy(dr, gr, size_t(H) * sizeof(T));
      }
      const double sum_g = lane_sum(H, [&](int64_t j) { return dr[j]; });
      const double sum_gx = lane_sum(H, [&](int64_t j) { return double(dr[j]) * double((xr[j] - m) * s); });
      const T ma = T(sum_g / double(H)), mb = T(sum_gx / double(H));
#pragma omp simd
      for (int64_t j = 0; j < H; ++j) dr[j] = s * (dr[j] - ma - (xr[j] - m) * s * mb);
    }
  }
  if (dw || db) {
    const int64_t nblocks = (H + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if (rows * H > kParallelMin && nblocks > 1)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t c0 = blk * kColBlock, c1 = std::min(H, c0 + kColBlock), nc = c1 - c0;
      double acc_w[kColBlock] = {}, acc_b[kColBlock] = {};
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = x + r * H + c0;
        const T* gr = dy + r * H + c0;
        const T m = mean[r], s = rstd[r];
#pragma omp simd
        for (int64_t c = 0; c < nc; ++c) {
          acc_w[c] += double(gr[c] * ((xr[c] - m) * s));
          acc_b[c] += double(gr[c]);
        }
      }
      for (int64_t c = 0; c < nc; ++c) {
        if (dw) dw[c0 + c] = T(acc_w[c]);
        if (db) db[c0 + c] = T(acc_b[c]);
      }
    }
  }
}
// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
// 16-bit x, weight, bias, y, dy, dx, dweight, dbias; mean / rstd float32 (the contract).
template <DType H, bool Backward> void layer_norm_half(const LayerNormArgs& a) {
  Widen<H> w;
  LayerNormArgs f = a;
  const int64_t n = a.rows * a.H;
  f.x = w.in(a.x, n);
  f.weight = w.in(a.weight, a.H);
  if (!Backward) {
    f.bias = w.in(a.bias, a.H);
    f.y = w.out(a.y, n);
    run_f32(layer_norm_forward_kernels(), f);
  } else {
    f.dy = w.in(a.dy, n);
    f.dx = w.out(a.dx, n);
    f.dweight = w.out(a.dweight, a.H);
    f.dbias = w.out(a.dbias, a.H);
    run_f32(layer_norm_backward_kernels(), f);
  }
  w.narrow();
}

template <DType H> void register_layernorm_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&layer_norm_half<H, false>>(layer_norm_forward_kernels(), cpu, H);
  set_kernel<&layer_norm_half<H, true>>(layer_norm_backward_kernels(), cpu, H);
}
}  // namespace

void register_layernorm_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(layer_norm_forward_kernels(), layer_norm_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(layer_norm_backward_kernels(), layer_norm_backward_cpu);
  register_layernorm_half<DType::f16>();
  register_layernorm_half<DType::bf16>();
}

}  // namespace oomlab
