// batchnorm_cpu.cpp — CPU kernels for batch_norm forward/backward (float32, float64).
// x is viewed as [N, C, HW]; weight/bias/running stats/saved stats share the element type
// T. OpenMP over channels (static schedule): each channel is reduced by one thread in a
// fixed order (n, then hw; SIMD lanes fixed at compile time) with double accumulators,
// so results do not depend on the thread count. Statistics use two passes (mean, then
// the sum of squared deviations). With a.relu (fused BatchNorm + ReLU) forward applies
// relu to y and backward reads dy through the saved output's mask. channels_last inputs
// take batchnorm_rows_cpu.cpp's row-order kernels.
#include <cmath>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/cpu/batchnorm_rows_cpu.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {
// relu in place, as kernels/cpu/activation_cpu.cpp: NaN kept, everything <= 0 becomes +0.
template <class T> void relu_row(T* q, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) q[i] = q[i] > T(0) || q[i] != q[i] ? q[i] : T(0);
}

template <class T> void batch_norm_forward_cpu(const BatchNormArgs& a) {
  if (a.channels_last) return batch_norm_forward_rows<T>(a);   // batchnorm_rows_cpu.cpp
  const int64_t N = a.N, C = a.C, HW = a.HW, M = N * HW;
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  const T* b = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  T* rm = static_cast<T*>(a.running_mean);
  T* rv = static_cast<T*>(a.running_var);
  T* sm = static_cast<T*>(a.save_mean);
  T* si = static_cast<T*>(a.save_invstd);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    double mean, invstd;
    if (a.training) {
      double s = 0.0;
      for (int64_t n = 0; n < N; ++n) {
        const T* p = x + (n * C + c) * HW;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < HW; ++i) s += double(p[i]);
      }
      mean = s / double(M);
      double ss = 0.0;
      for (int64_t n = 0; n < N; ++n) {
        const T* p = x + (n * C + c) * HW;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < HW; ++i) { double d = double(p[i]) - mean; ss += d * d; }
      }
      invstd = 1.0 / std::sqrt(ss / double(M) + a.eps);
      if (sm) sm[c] = T(mean);
      if (si) si[c] = T(invstd);
      if (rm) {
        rm[c] = T((1.0 - a.momentum) * double(rm[c]) + a.momentum * mean);
        rv[c] = T((1.0 - a.momentum) * double(rv[c]) + a.momentum * ss / double(M - 1));
      }
    } else {
      mean = double(rm[c]);
      invstd = 1.0 / std::sqrt(double(rv[c]) + a.eps);
    }
    const double sc = w ? double(w[c]) * invstd : invstd;
    const T scale = T(sc), shift = T((b ? double(b[c]) : 0.0) - mean * sc);
    for (int64_t n = 0; n < N; ++n) {
      const T* p = x + (n * C + c) * HW;
      T* q = y + (n * C + c) * HW;
#pragma omp simd
      for (int64_t i = 0; i < HW; ++i) q[i] = p[i] * scale + shift;
      if (a.relu) relu_row(q, HW);
    }
  }
}

// Training: dx = w*invstd * (dy - mean(dy) - xhat * mean(dy*xhat)), xhat = (x-mean)*invstd.
// Eval: dx = dy * w / sqrt(running_var + eps). dweight = sum(dy*xhat), dbias = sum(dy).
// Relu (fused BatchNorm + ReLU): dy is read through the forward output's mask, dy[i] where
// y[i] > 0 (or NaN), 0 elsewhere: relu's backward, without its dx tensor.
template <class T, bool Relu> void batch_norm_backward_loops(const BatchNormArgs& a) {
  const int64_t N = a.N, C = a.C, HW = a.HW, M = N * HW;
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  const T* dy = static_cast<const T*>(a.dy);
  const T* ym = static_cast<const T*>(a.y);
  T* dx = static_cast<T*>(a.dx);
  T* dw = static_cast<T*>(a.dweight);
  T* db = static_cast<T*>(a.dbias);
  const T* rm = static_cast<const T*>(a.running_mean);
  const T* rv = static_cast<const T*>(a.running_var);
  const T* sm = static_cast<const T*>(a.save_mean);
  const T* si = static_cast<const T*>(a.save_invstd);
  const bool need_sums = dw || db || (dx && a.training);
  const bool need_xmu = dw || (dx && a.training);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < C; ++c) {
    // Row n of dy for channel c as this kernel reads it: through relu's mask when fused
    // (bit-identical to relu's dx), written into a row buffer the loops below then read.
    std::vector<T> masked(Relu ? size_t(HW) : 0);
    auto dy_row = [&](int64_t n) -> const T* {
      const T* g = dy + (n * C + c) * HW;
      if constexpr (!Relu) return g;
      const T* yr = ym + (n * C + c) * HW;
      T* q = masked.data();
#pragma omp simd
      for (int64_t i = 0; i < HW; ++i) q[i] = yr[i] <= T(0) ? T(0) : g[i];
      return q;
    };
    // invstd's source is absent when only dbias is wanted (the op then saves no stats).
    double mean = 0.0, invstd = 0.0;
    if (a.training) {
      if (need_xmu) mean = double(sm[c]);
      if (si) invstd = double(si[c]);
    } else {
      if (need_xmu) mean = double(rm[c]);
      if (rv) invstd = 1.0 / std::sqrt(double(rv[c]) + a.eps);
    }
    double sum_dy = 0.0, sum_dy_xmu = 0.0;
    if (need_sums) {
      for (int64_t n = 0; n < N; ++n) {
        const T* g = dy_row(n);
        if (need_xmu) {
          const T* p = x + (n * C + c) * HW;
#pragma omp simd reduction(+ : sum_dy, sum_dy_xmu)
          for (int64_t i = 0; i < HW; ++i) {
            sum_dy += double(g[i]);
            sum_dy_xmu += double(g[i]) * (double(p[i]) - mean);
          }
        } else {
#pragma omp simd reduction(+ : sum_dy)
          for (int64_t i = 0; i < HW; ++i) sum_dy += double(g[i]);
        }
      }
    }
    if (db) db[c] = T(sum_dy);
    if (dw) dw[c] = T(sum_dy_xmu * invstd);
    if (!dx) continue;
    const double wi = (w ? double(w[c]) : 1.0) * invstd;
    if (a.training) {
      // dx = (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy*(x-mean))) * w * invstd
      const T mu = T(mean), dmean = T(sum_dy / double(M)), k = T(invstd * invstd * sum_dy_xmu / double(M)),
              wt = T(wi);
      for (int64_t n = 0; n < N; ++n) {
        const T* g = dy_row(n);
        const T* p = x + (n * C + c) * HW;
        T* q = dx + (n * C + c) * HW;
#pragma omp simd
        for (int64_t i = 0; i < HW; ++i) q[i] = (g[i] - dmean - (p[i] - mu) * k) * wt;
      }
    } else {
      const T k1 = T(wi);
      for (int64_t n = 0; n < N; ++n) {
        const T* g = dy_row(n);
        T* q = dx + (n * C + c) * HW;
#pragma omp simd
        for (int64_t i = 0; i < HW; ++i) q[i] = k1 * g[i];
      }
    }
  }
}
template <class T> void batch_norm_backward_cpu(const BatchNormArgs& a) {
  if (a.channels_last) return batch_norm_backward_rows<T>(a);
  if (a.relu) return batch_norm_backward_loops<T, true>(a);
  batch_norm_backward_loops<T, false>(a);
}

// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
template <DType H, bool Backward> void batch_norm_half(const BatchNormArgs& a) {
  Widen<H> w;
  BatchNormArgs f = a;
  const int64_t n = a.N * a.C * a.HW;
  f.x = w.in(a.x, n);
  if (!Backward) { f.y = w.out(a.y, n); run_f32(batch_norm_forward_kernels(), f); }
  else {
    f.dy = w.in(a.dy, n);
    f.dx = w.out(a.dx, n);
    if (a.relu) f.y = const_cast<float*>(w.in(a.y, n));   // the mask: read only
    run_f32(batch_norm_backward_kernels(), f);
  }
  w.narrow();
}

template <DType H> void register_batchnorm_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&batch_norm_half<H, false>>(batch_norm_forward_kernels(), cpu, H);
  set_kernel<&batch_norm_half<H, true>>(batch_norm_backward_kernels(), cpu, H);
}
}  // namespace

void register_batchnorm_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(batch_norm_forward_kernels(), batch_norm_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(batch_norm_backward_kernels(), batch_norm_backward_cpu);
  register_batchnorm_half<DType::f16>();
  register_batchnorm_half<DType::bf16>();
}

}  // namespace oomlab
