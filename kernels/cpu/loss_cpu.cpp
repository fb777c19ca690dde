// loss_cpu.cpp — CPU kernels for softmax / log_softmax (forward, backward) and nll_loss
// (forward, backward), float32 and float64. Rows are independent (OpenMP over rows,
// static schedule); row sums accumulate in double in column order, the nll sum in row
// order on one thread, so results do not depend on the thread count (row sums use 8
// fixed lanes, see lane_sum).
// Softmax is max-shifted: y = exp(x - max) / sum, log_softmax = x - max - log(sum).
// nll skips rows whose target equals ignore_index; the mean is over the rest.
#include <cmath>
#include <cstring>

#include "engine/ops/loss.h"

namespace oomlab {
namespace {
constexpr int64_t kParallelMin = 32768;

// Row reductions over 8 fixed lanes (combined in lane order): vectorisable without
// fast-math, and the summation order depends only on C, never on threads.
constexpr int kLanes = 8;
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
// sum_j f(j) in double.
template <class F> double lane_sum(int64_t C, F f) {
  double s[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= C; j += kLanes)
    for (int k = 0; k < kLanes; ++k) s[k] += f(j + k);
  for (; j < C; ++j) s[0] += f(j);
  double r = 0.0;
  for (int k = 0; k < kLanes; ++k) r += s[k];
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
}  // namespace

void register_loss_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(softmax_forward_kernels(), softmax_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(softmax_backward_kernels(), softmax_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(nll_forward_kernels(), nll_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(nll_backward_kernels(), nll_backward_cpu);
}

}  // namespace oomlab
