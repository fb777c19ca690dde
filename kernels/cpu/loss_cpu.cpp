// loss_cpu.cpp — CPU kernels of the loss family (kernels/loss.h): nll_loss over [N, C]
// log-probabilities and pixel_cross_entropy (per-pixel log-softmax over C fused with nll),
// forward and backward, float32 and float64. Rows / pixels whose target is ignore_index
// are skipped; the mean is over the rest (count 0 -> NaN). Deterministic: the nll sum runs
// in row order on one thread; the pixel loss sums per fixed pixel block in double, blocks
// combined in order; backward kernels write each element once (OpenMP, static schedule).
// float exps use exp_f32 (fast_math.h), double exps std::exp. count_correct: the host rule of
// kernels/loss.h (count_correct_rows) over the four float types.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/fast_math.h"
#include "kernels/loss.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {
constexpr int64_t kParallelMin = 32768;   // elements below which a kernel stays serial

// ---- nll_loss -------------------------------------------------------------------------
template <class T> void nll_forward_cpu(const NllArgs& a) {
  const T* lp = static_cast<const T*>(a.logp);
  double sum = 0.0;
  int64_t count = 0;
  for (int64_t i = 0; i < a.N; ++i) {
    const int64_t t = a.target[i];
    if (t == a.ignore_index || t < 0 || t >= a.C) continue;   // range checked by the op
    sum += double(lp[i * a.C + t]);
    ++count;
  }
  *static_cast<T*>(a.loss) = T(-sum / double(count));   // count 0 -> NaN, as PyTorch
}

template <class T> void nll_backward_cpu(const NllArgs& a) {
  T* d = static_cast<T*>(a.dlogp);
  int64_t count = 0;
  for (int64_t i = 0; i < a.N; ++i) {
    const int64_t t = a.target[i];
    if (t != a.ignore_index && t >= 0 && t < a.C) ++count;
  }
  const T w = T(-double(*static_cast<const T*>(a.dloss)) / double(count));
#pragma omp parallel for schedule(static) if (a.N * a.C > kParallelMin)
  for (int64_t i = 0; i < a.N; ++i) {
    T* row = d + i * a.C;
    std::memset(static_cast<void*>(row), 0, size_t(a.C) * sizeof(T));
    const int64_t t = a.target[i];
    if (t != a.ignore_index && t >= 0 && t < a.C) row[t] = w;
  }
}
// ---- pixel cross-entropy -----------------------------------------------------------
// Work items: (image n, block of kBlock pixels); the pixel loop is innermost and
// contiguous, the class loop (stride HW) outside it. Fixed by the shape, not the threads.
constexpr int64_t kBlock = 256;

inline bool kept(int64_t t, int64_t C, int64_t ignore) { return t != ignore && t >= 0 && t < C; }

template <class T> void pixel_cross_entropy_forward_cpu(const PixelCrossEntropyArgs& a) {
  const T* x = static_cast<const T*>(a.logits);
  T* lp = static_cast<T*>(a.logp);
  const int64_t N = a.N, C = a.C, HW = a.HW;
  const int64_t per_img = (HW + kBlock - 1) / kBlock, items = N * per_img;
  std::vector<double> part(size_t(items), 0.0);
  std::vector<int64_t> cnt(size_t(items), 0);
  if (C > 0) {
#pragma omp parallel for schedule(static) if (N * C * HW > kParallelMin)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t n = it / per_img, p0 = (it % per_img) * kBlock, B = std::min(kBlock, HW - p0);
      const T* xb = x + n * C * HW + p0;
      T* lb = lp + n * C * HW + p0;
      T mx[kBlock];
      double sum[kBlock];
      for (int64_t j = 0; j < B; ++j) { mx[j] = xb[j]; sum[j] = 0.0; }
      for (int64_t c = 1; c < C; ++c)
        for (int64_t j = 0; j < B; ++j) mx[j] = xb[c * HW + j] > mx[j] ? xb[c * HW + j] : mx[j];
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = 0; j < B; ++j) sum[j] += double(exp_t(xb[c * HW + j] - mx[j]));
      T lse[kBlock];
      for (int64_t j = 0; j < B; ++j) lse[j] = T(std::log(sum[j]));
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = 0; j < B; ++j) lb[c * HW + j] = xb[c * HW + j] - mx[j] - lse[j];
      const int64_t* tb = a.target + n * HW + p0;
      double s = 0.0;
      int64_t k = 0;
      for (int64_t j = 0; j < B; ++j)
        if (kept(tb[j], C, a.ignore_index)) { s += double(lb[tb[j] * HW + j]); ++k; }
      part[size_t(it)] = s;
      cnt[size_t(it)] = k;
    }
  }
  double total = 0.0;
  int64_t count = 0;
  for (int64_t it = 0; it < items; ++it) { total += part[size_t(it)]; count += cnt[size_t(it)]; }
  *static_cast<T*>(a.loss) = T(-total / double(count));   // count 0 -> NaN, as PyTorch
}

template <class T> void pixel_cross_entropy_backward_cpu(const PixelCrossEntropyArgs& a) {
  const T* lp = static_cast<const T*>(a.logp);
  T* dx = static_cast<T*>(a.dlogits);
  const int64_t N = a.N, C = a.C, HW = a.HW;
  int64_t count = 0;   // integer sum: exact whatever the order
#pragma omp parallel for schedule(static) reduction(+ : count) if (N * HW > kParallelMin)
  for (int64_t i = 0; i < N * HW; ++i) count += kept(a.target[i], C, a.ignore_index) ? 1 : 0;
  const T w = T(double(*static_cast<const T*>(a.dloss)) / double(count));
  const int64_t per_img = (HW + kBlock - 1) / kBlock, items = N * per_img;
#pragma omp parallel for schedule(static) if (N * C * HW > kParallelMin)
  for (int64_t it = 0; it < items; ++it) {
    const int64_t n = it / per_img, p0 = (it % per_img) * kBlock, B = std::min(kBlock, HW - p0);
    const T* lb = lp + n * C * HW + p0;
    T* db = dx + n * C * HW + p0;
    const int64_t* tb = a.target + n * HW + p0;
    T wj[kBlock];
    for (int64_t j = 0; j < B; ++j) wj[j] = kept(tb[j], C, a.ignore_index) ? w : T(0);
    for (int64_t c = 0; c < C; ++c)
      for (int64_t j = 0; j < B; ++j) db[c * HW + j] = exp_t(lb[c * HW + j]) * wj[j];
    for (int64_t j = 0; j < B; ++j)
      if (kept(tb[j], C, a.ignore_index)) db[tb[j] * HW + j] -= w;
  }
}
// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
template <DType H, bool Backward> void nll_half(const NllArgs& a) {
  Widen<H> w;
  NllArgs f = a;
  if (!Backward) { f.logp = w.in(a.logp, a.N * a.C); f.loss = w.out(a.loss, 1); run_f32(nll_forward_kernels(), f); }
  else { f.dloss = w.in(a.dloss, 1); f.dlogp = w.out(a.dlogp, a.N * a.C); run_f32(nll_backward_kernels(), f); }
  w.narrow();
}
template <DType H, bool Backward> void pixel_ce_half(const PixelCrossEntropyArgs& a) {
  Widen<H> w;
  PixelCrossEntropyArgs f = a;
  const int64_t n = a.N * a.C * a.HW;
  if (!Backward) {
    f.logits = w.in(a.logits, n); f.logp = w.out(a.logp, n); f.loss = w.out(a.loss, 1);
    run_f32(pixel_cross_entropy_forward_kernels(), f);
  } else {
    f.logp = const_cast<float*>(w.in(a.logp, n)); f.dloss = w.in(a.dloss, 1); f.dlogits = w.out(a.dlogits, n);
    run_f32(pixel_cross_entropy_backward_kernels(), f);
  }
  w.narrow();
}

// ---- count_correct ----------------------------------------------------------------------
template <DType D> void count_correct_cpu(const CountCorrectArgs& a) {
  *a.correct = count_correct_rows(a.N, a.C, a.s0, a.s1, a.target, a.ts, [&](int64_t k) -> double {
    if constexpr (D == DType::f32) return double(static_cast<const float*>(a.logits)[k]);
    else if constexpr (D == DType::f64) return static_cast<const double*>(a.logits)[k];
    else if constexpr (D == DType::f16) return double(half_to_float(static_cast<const uint16_t*>(a.logits)[k]));
    else return double(bf16_to_float(static_cast<const uint16_t*>(a.logits)[k]));
  });
}

template <DType H> void register_loss_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&nll_half<H, false>>(nll_forward_kernels(), cpu, H);
  set_kernel<&nll_half<H, true>>(nll_backward_kernels(), cpu, H);
  set_kernel<&pixel_ce_half<H, false>>(pixel_cross_entropy_forward_kernels(), cpu, H);
  set_kernel<&pixel_ce_half<H, true>>(pixel_cross_entropy_backward_kernels(), cpu, H);
}
}  // namespace

void register_loss_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(nll_forward_kernels(), nll_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(nll_backward_kernels(), nll_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(pixel_cross_entropy_forward_kernels(), pixel_cross_entropy_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(pixel_cross_entropy_backward_kernels(), pixel_cross_entropy_backward_cpu);
  register_loss_half<DType::f16>();
  register_loss_half<DType::bf16>();
  set_kernel<&count_correct_cpu<DType::f32>>(count_correct_kernels(), DeviceType::cpu, DType::f32);
  set_kernel<&count_correct_cpu<DType::f64>>(count_correct_kernels(), DeviceType::cpu, DType::f64);
  set_kernel<&count_correct_cpu<DType::f16>>(count_correct_kernels(), DeviceType::cpu, DType::f16);
  set_kernel<&count_correct_cpu<DType::bf16>>(count_correct_kernels(), DeviceType::cpu, DType::bf16);
}

}  // namespace oomlab
