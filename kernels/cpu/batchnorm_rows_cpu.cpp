// batchnorm_rows_cpu.cpp — CPU batch_norm forward/backward for channels_last inputs
// (BatchNormArgs::channels_last: x is [M, C] rows, M = N*H*W; float32, float64), called by
// batchnorm_cpu.cpp. A channel's values are C apart in memory, so the per-channel loops of
// the NCHW kernels would sweep the whole tensor once per channel; here every pass walks
// the rows in memory order with a row of double accumulators per chunk of kChunkRows rows
// (OpenMP over chunks), and the chunks' sums are added in chunk order: the chunking depends
// on the shape alone, so results do not depend on the thread count. Statistics use two
// passes (mean, then the sum of squared deviations), as the NCHW kernels; only the order of
// the additions differs from theirs.
#include "kernels/cpu/batchnorm_rows_cpu.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace oomlab {
namespace {

constexpr int64_t kChunkRows = 256;

// out[c] = sum over rows r of f(r, c, acc-row) — f adds row r's terms into acc (C doubles).
template <class F> std::vector<double> chunked_sums(int64_t M, int64_t C, int64_t width, F f) {
  const int64_t chunks = (M + kChunkRows - 1) / kChunkRows;
  std::vector<double> part(size_t(chunks * C * width), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    double* acc = part.data() + k * C * width;
    for (int64_t r = k * kChunkRows; r < std::min(M, (k + 1) * kChunkRows); ++r) f(r, acc);
  }
  std::vector<double> total(size_t(C * width), 0.0);
  for (int64_t k = 0; k < chunks; ++k)
    for (int64_t j = 0; j < C * width; ++j) total[size_t(j)] += part[size_t(k * C * width + j)];
  return total;
}

template <class T> void forward(const BatchNormArgs& a) {
  const int64_t M = a.N, C = a.C;
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  const T* b = static_cast<const T*>(a.bias);
  T* rm = static_cast<T*>(a.running_mean);
  T* rv = static_cast<T*>(a.running_var);
  std::vector<double> mean(static_cast<size_t>(C)), invstd(static_cast<size_t>(C));
  if (a.training) {
    const std::vector<double> s = chunked_sums(M, C, 1, [&](int64_t r, double* acc) {
      const T* p = x + r * C;
      for (int64_t c = 0; c < C; ++c) acc[c] += double(p[c]);
    });
    for (int64_t c = 0; c < C; ++c) mean[size_t(c)] = s[size_t(c)] / double(M);
    const std::vector<double> ss = chunked_sums(M, C, 1, [&](int64_t r, double* acc) {
      const T* p = x + r * C;
      for (int64_t c = 0; c < C; ++c) { const double d = double(p[c]) - mean[size_t(c)]; acc[c] += d * d; }
    });
    for (int64_t c = 0; c < C; ++c) {
      invstd[size_t(c)] = 1.0 / std::sqrt(ss[size_t(c)] / double(M) + a.eps);
      if (a.save_mean) static_cast<T*>(a.save_mean)[c] = T(mean[size_t(c)]);
      if (a.save_invstd) static_cast<T*>(a.save_invstd)[c] = T(invstd[size_t(c)]);
      if (rm) {
        rm[c] = T((1.0 - a.momentum) * double(rm[c]) + a.momentum * mean[size_t(c)]);
        rv[c] = T((1.0 - a.momentum) * double(rv[c]) + a.momentum * ss[size_t(c)] / double(M - 1));
      }
    }
  } else {
    for (int64_t c = 0; c < C; ++c) {
      mean[size_t(c)] = double(rm[c]);
      invstd[size_t(c)] = 1.0 / std::sqrt(double(rv[c]) + a.eps);
    }
  }
  std::vector<T> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double sc = w ? double(w[c]) * invstd[size_t(c)] : invstd[size_t(c)];
    scale[size_t(c)] = T(sc);
    shift[size_t(c)] = T((b ? double(b[c]) : 0.0) - mean[size_t(c)] * sc);
  }
  T* y = static_cast<T*>(a.y);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < M; ++r) {
    const T* p = x + r * C;
    T* q = y + r * C;
    for (int64_t c = 0; c < C; ++c) {
      const T v = p[c] * scale[size_t(c)] + shift[size_t(c)];
      q[c] = a.relu && !(v > T(0) || v != v) ? T(0) : v;
    }
  }
}

// As batchnorm_cpu.cpp's backward: training dx = w*invstd * (dy - mean(dy) - xhat *
// mean(dy*xhat)); eval dx = dy * w * invstd; dweight = sum(dy*xhat), dbias = sum(dy); with
// relu, dy read through the saved output's mask.
template <class T> void backward(const BatchNormArgs& a) {
  const int64_t M = a.N, C = a.C;
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  const T* dy = static_cast<const T*>(a.dy);
  const T* ym = static_cast<const T*>(a.y);
  const T* ms = static_cast<const T*>(a.training ? a.save_mean : a.running_mean);
  const bool need_xmu = a.dweight || (a.dx && a.training);
  std::vector<double> mean(static_cast<size_t>(C), 0.0), invstd(static_cast<size_t>(C), 0.0);
  for (int64_t c = 0; c < C; ++c) {
    if (need_xmu) mean[size_t(c)] = double(ms[c]);
    if (a.training && a.save_invstd) invstd[size_t(c)] = double(static_cast<const T*>(a.save_invstd)[c]);
    if (!a.training && a.running_var)
      invstd[size_t(c)] = 1.0 / std::sqrt(double(static_cast<const T*>(a.running_var)[c]) + a.eps);
  }
  auto grad = [&](int64_t r, int64_t c) { return a.relu && ym[r * C + c] <= T(0) ? T(0) : dy[r * C + c]; };
  std::vector<double> sums(size_t(2 * C), 0.0);   // [sum dy | sum dy*(x-mean)]
  if (a.dweight || a.dbias || (a.dx && a.training))
    sums = chunked_sums(M, C, 2, [&](int64_t r, double* acc) {
      for (int64_t c = 0; c < C; ++c) {
        const double g = double(grad(r, c));
        acc[c] += g;
        if (need_xmu) acc[C + c] += g * (double(x[r * C + c]) - mean[size_t(c)]);
      }
    });
  for (int64_t c = 0; c < C; ++c) {
    if (a.dbias) static_cast<T*>(a.dbias)[c] = T(sums[size_t(c)]);
    if (a.dweight) static_cast<T*>(a.dweight)[c] = T(sums[size_t(C + c)] * invstd[size_t(c)]);
  }
  if (!a.dx) return;
  std::vector<T> mu(static_cast<size_t>(C)), dmean(static_cast<size_t>(C)), k(static_cast<size_t>(C)),
      wt(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double ic = invstd[size_t(c)];
    wt[size_t(c)] = T((w ? double(w[c]) : 1.0) * ic);
    mu[size_t(c)] = T(mean[size_t(c)]);
    dmean[size_t(c)] = T(sums[size_t(c)] / double(M));
    k[size_t(c)] = T(ic * ic * sums[size_t(C + c)] / double(M));
  }
  T* dx = static_cast<T*>(a.dx);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < C; ++c) {
      const size_t i = size_t(c);
      const T g = grad(r, c);
      dx[r * C + c] = a.training ? (g - dmean[i] - (x[r * C + c] - mu[i]) * k[i]) * wt[i] : wt[i] * g;
    }
}
}  // namespace

void batch_norm_forward_rows_f32(const BatchNormArgs& a) { forward<float>(a); }
void batch_norm_forward_rows_f64(const BatchNormArgs& a) { forward<double>(a); }
void batch_norm_backward_rows_f32(const BatchNormArgs& a) { backward<float>(a); }
void batch_norm_backward_rows_f64(const BatchNormArgs& a) { backward<double>(a); }

}  // namespace oomlab
