// groupnorm_cpu.cpp — CPU kernels of the groupnorm family (kernels/groupnorm.h), float32
// and float64 (16-bit: the float32 kernels on widened copies, half_widen.h). Threading: OpenMP over
// the N*G groups (statistics, y, dx) and over the C channels (dweight / dbias); each task
// sums its values in double in index order, so no result depends on the thread count.
// Arithmetic in double, rounded once to T at the store (the CUDA kernels do the same).
#include <cmath>
#include <cstdint>

#include "kernels/groupnorm.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {
constexpr int64_t kParallelMin = 32768;   // elements below which loops stay serial

template <class T> void group_norm_forward_cpu(const GroupNormArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  const T* b = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  T* mean_out = static_cast<T*>(a.mean);
  T* rstd_out = static_cast<T*>(a.rstd);
  const int64_t Cg = a.C / a.G, M = Cg * a.HW;
#pragma omp parallel for schedule(static) if (a.N * a.C * a.HW > kParallelMin)
  for (int64_t ng = 0; ng < a.N * a.G; ++ng) {
    const int64_t g = ng % a.G;
    const T* xg = x + ng * M;
    T* yg = y + ng * M;
    double s = 0;
    for (int64_t i = 0; i < M; ++i) s += double(xg[i]);
    const double mean = M > 0 ? s / double(M) : 0.0;
    double ss = 0;
    for (int64_t i = 0; i < M; ++i) ss += (double(xg[i]) - mean) * (double(xg[i]) - mean);
    const double rstd = 1.0 / std::sqrt((M > 0 ? ss / double(M) : 0.0) + a.eps);
    mean_out[ng] = T(mean);
    rstd_out[ng] = T(rstd);
    for (int64_t k = 0; k < Cg; ++k) {
      const int64_t c = g * Cg + k;
      const double wc = w ? double(w[c]) : 1.0, bc = b ? double(b[c]) : 0.0;
      for (int64_t p = 0; p < a.HW; ++p) {
        const int64_t i = k * a.HW + p;
        yg[i] = T((double(xg[i]) - mean) * rstd * wc + bc);
      }
    }
  }
}

template <class T> void group_norm_backward_cpu(const GroupNormArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  const T* dy = static_cast<const T*>(a.dy);
  const T* mean_in = static_cast<const T*>(a.mean);
  const T* rstd_in = static_cast<const T*>(a.rstd);
  T* dx = static_cast<T*>(a.dx);
  T* dw = static_cast<T*>(a.dweight);
  T* db = static_cast<T*>(a.dbias);
  const int64_t Cg = a.C / a.G, M = Cg * a.HW;
  if (dx) {
    // dx = rstd * (dy*w - mean(dy*w) - xhat * mean(dy*w*xhat)) over the group.
#pragma omp parallel for schedule(static) if (a.N * a.C * a.HW > kParallelMin)
    for (int64_t ng = 0; ng < a.N * a.G; ++ng) {
      const int64_t g = ng % a.G;
      const double mean = double(mean_in[ng]), rstd = double(rstd_in[ng]);
      const T* xg = x + ng * M;
      const T* dyg = dy + ng * M;
      T* dxg = dx + ng * M;
      double s1 = 0, s2 = 0;
      for (int64_t k = 0; k < Cg; ++k) {
        const double wc = w ? double(w[g * Cg + k]) : 1.0;
        for (int64_t p = 0; p < a.HW; ++p) {
          const int64_t i = k * a.HW + p;
          const double gw = double(dyg[i]) * wc;
          s1 += gw;
          s2 += gw * (double(xg[i]) - mean) * rstd;
        }
      }
      const double m1 = M > 0 ? s1 / double(M) : 0.0, m2 = M > 0 ? s2 / double(M) : 0.0;
      for (int64_t k = 0; k < Cg; ++k) {
        const double wc = w ? double(w[g * Cg + k]) : 1.0;
        for (int64_t p = 0; p < a.HW; ++p) {
          const int64_t i = k * a.HW + p;
          const double xhat = (double(xg[i]) - mean) * rstd;
          dxg[i] = T(rstd * (double(dyg[i]) * wc - m1 - xhat * m2));
        }
      }
    }
  }
  if (dw || db) {
#pragma omp parallel for schedule(static) if (a.N * a.C * a.HW > kParallelMin)
    for (int64_t c = 0; c < a.C; ++c) {
      const int64_t g = c / Cg;
      double sw = 0, sb = 0;
      for (int64_t n = 0; n < a.N; ++n) {
        const double mean = double(mean_in[n * a.G + g]), rstd = double(rstd_in[n * a.G + g]);
        const T* xc = x + (n * a.C + c) * a.HW;
        const T* dyc = dy + (n * a.C + c) * a.HW;
        for (int64_t p = 0; p < a.HW; ++p) {
          sb += double(dyc[p]);
          sw += double(dyc[p]) * (double(xc[p]) - mean) * rstd;
        }
      }
      if (dw) dw[c] = T(sw);
      if (db) db[c] = T(sb);
    }
  }
}
// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
// 16-bit x, y, dy, dx; weight, bias, running and saved statistics float32 (the op's rule).
// 16-bit x, weight, bias, y, dy, dx, dweight, dbias; mean / rstd float32 (the contract).
template <DType H, bool Backward> void group_norm_half(const GroupNormArgs& a) {
  Widen<H> w;
  GroupNormArgs f = a;
  const int64_t n = a.N * a.C * a.HW;
  f.x = w.in(a.x, n);
  f.weight = w.in(a.weight, a.C);
  if (!Backward) {
    f.bias = w.in(a.bias, a.C);
    f.y = w.out(a.y, n);
    run_f32(group_norm_forward_kernels(), f);
  } else {
    f.dy = w.in(a.dy, n);
    f.dx = w.out(a.dx, n);
    f.dweight = w.out(a.dweight, a.C);
    f.dbias = w.out(a.dbias, a.C);
    run_f32(group_norm_backward_kernels(), f);
  }
  w.narrow();
}

template <DType H> void register_groupnorm_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&group_norm_half<H, false>>(group_norm_forward_kernels(), cpu, H);
  set_kernel<&group_norm_half<H, true>>(group_norm_backward_kernels(), cpu, H);
}
}  // namespace

void register_groupnorm_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(group_norm_forward_kernels(), group_norm_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(group_norm_backward_kernels(), group_norm_backward_cpu);
  register_groupnorm_half<DType::f16>();
  register_groupnorm_half<DType::bf16>();
}

}  // namespace oomlab
