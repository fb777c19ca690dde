// transformer_cpu.cpp — CPU kernels for embedding, layer_norm, gelu and masked_softmax
// (forward and backward, float32 and float64); arg structs in engine/ops/transformer_kernels.h.
// Threading: OpenMP, static schedule. Row-wise work (embedding gather, layer_norm
// normalisation and dx, softmax rows) runs over rows; column reductions (embedding
// weight grad, layer_norm dweight / dbias) run over fixed 64-column blocks and add rows
// in row order, so no result depends on the thread count and there are no atomics.
// Row sums accumulate in double over 8 fixed lanes (order fixed by the row length only).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/ops/transformer_kernels.h"
#include "kernels/cpu/fast_math.h"

namespace oomlab {
namespace {
constexpr int64_t kParallelMin = 32768;   // elements below which loops stay serial
constexpr int64_t kColBlock = 64;         // columns per task in column reductions

// sum_{j < n} f(j) in double over 8 fixed lanes combined in lane order: vectorises
// (two independent 4-wide accumulators) and the order depends only on n, never threads.
constexpr int kLanes = 8;
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

// ---- embedding ----------------------------------------------------------------------
template <class T> void embedding_forward_cpu(const EmbeddingArgs& a) {
  const T* w = static_cast<const T*>(a.weight);
  T* out = static_cast<T*>(a.out);
  const int64_t H = a.H;
#pragma omp parallel for schedule(static) if (a.N * H > kParallelMin)
  for (int64_t n = 0; n < a.N; ++n) {
    const int64_t id = a.ids[n];
    T* o = out + n * H;
    if (id >= 0 && id < a.V) std::memcpy(o, w + id * H, size_t(H) * sizeof(T));
    else std::memset(static_cast<void*>(o), 0, size_t(H) * sizeof(T));
  }
}

// dweight is overwritten: each column block zeroes its columns of every row, then adds
// the output-grad rows in index order (deterministic duplicates, no atomics).
template <class T> void embedding_backward_cpu(const EmbeddingArgs& a) {
  const T* g = static_cast<const T*>(a.dout);
  T* dw = static_cast<T*>(a.dweight);
  const int64_t H = a.H, V = a.V, N = a.N;
  const int64_t nblocks = (H + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if ((N + V) * H > kParallelMin && nblocks > 1)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kColBlock, c1 = std::min(H, c0 + kColBlock);
    for (int64_t v = 0; v < V; ++v)
      std::memset(static_cast<void*>(dw + v * H + c0), 0, size_t(c1 - c0) * sizeof(T));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t id = a.ids[n];
      if (id < 0 || id >= V || id == a.padding_idx) continue;
      T* d = dw + id * H;
      const T* gr = g + n * H;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) d[c] += gr[c];
    }
  }
}

// ---- layer_norm ---------------------------------------------------------------------
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

// ---- vectorisable exp / erf -------------------------------------------------------------
// glibc's expf / erff are scalar calls, so float32 uses inline versions GCC vectorises:
// exp = exp_f32 (kernels/cpu/fast_math.h, <= 1 ulp); erf by
// Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7 + rounding), the form PyTorch's AVX2
// Vectorized<float>::erf uses. float64 calls std::exp / std::erf (gradcheck precision).
// Loops are kept separate (clamp, exp, use) so every one of them vectorises.
constexpr int64_t kElemChunk = 4096;   // elements per task in elementwise kernels

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

// erf(z) given e = exp(-z^2) (float32: A&S 7.1.26; float64: std::erf).
template <class T> inline T erf_with_exp(T z, T e) {
  if constexpr (std::is_same_v<T, float>) {
    const float t = 1.0f / (1.0f + 0.3275911f * std::fabs(z));
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    return std::copysign(1.0f - p * t * e, z);
  } else {
    return std::erf(z);
  }
}

// ---- gelu -----------------------------------------------------------------------------
constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluCoef = 0.044715;

// erf form: e = exp(-x^2/2) serves erf(x/sqrt2) and the normal pdf.
// tanh form: tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|), u = sqrt(2/pi)(x + c x^3).
template <class T> inline T gelu_exp_arg(T v, bool tanh_approx) {
  if (!tanh_approx) return T(-0.5) * v * v;
  return T(-2) * std::fabs(T(kSqrt2OverPi) * (v + T(kGeluCoef) * v * v * v));
}
template <class T> inline T tanh_with_exp(T v, T e) {
  return std::copysign((T(1) - e) / (T(1) + e), v);   // u has the sign of v
}

// out[i] holds exp(gelu_exp_arg(x[i])) on entry to f(i); f writes the result.
template <class T, class F> void gelu_chunks(const T* x, T* out, int64_t n, bool tanh_approx, F f) {
  const int64_t nchunks = (n + kElemChunk - 1) / kElemChunk;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    const int64_t i0 = ch * kElemChunk, i1 = std::min(n, i0 + kElemChunk);
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) out[i] = gelu_exp_arg(x[i], tanh_approx);
    exp_nonpos(out + i0, i1 - i0);
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) out[i] = f(i, out[i]);
  }
}

template <class T> void gelu_forward_cpu(const GeluArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  if (a.tanh_approx)
    gelu_chunks(x, y, a.n, true, [x](int64_t i, T e) { return T(0.5) * x[i] * (T(1) + tanh_with_exp(x[i], e)); });
  else
    gelu_chunks(x, y, a.n, false, [x](int64_t i, T e) {
      return T(0.5) * x[i] * (T(1) + erf_with_exp(x[i] * T(kSqrt1_2), e));
    });
}

template <class T> void gelu_backward_cpu(const GeluArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
  if (a.tanh_approx) {
    // d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 c x^2)
    gelu_chunks(x, dx, a.n, true, [x, dy](int64_t i, T e) {
      const T v = x[i], t = tanh_with_exp(v, e);
      const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCoef) * v * v);
      return dy[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
    });
  } else {
    // d/dx = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi)
    gelu_chunks(x, dx, a.n, false, [x, dy](int64_t i, T e) {
      const T v = x[i];
      const T cdf = T(0.5) * (T(1) + erf_with_exp(v * T(kSqrt1_2), e));
      return dy[i] * (cdf + v * T(kInvSqrt2Pi) * e);
    });
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
    if (a.mask && kept[size_t(b)] == 0) {   // every key padded: zeros (not NaN)
      std::memset(static_cast<void*>(yr), 0, size_t(C) * sizeof(T));
      continue;
    }
    // scores (padded keys at -inf) into y, then max, shift, exp (exp(-inf) = 0), normalise.
    // A NaN need not win the max: it makes the row sum, hence the row, NaN.
    if (kr) {
#pragma omp simd
      for (int64_t j = 0; j < C; ++j)
        yr[j] = std::bit_cast<T>((std::bit_cast<Bits>(sc * xr[j]) & kr[j]) | (ninf & ~kr[j]));
    } else {
#pragma omp simd
      for (int64_t j = 0; j < C; ++j) yr[j] = sc * xr[j];
    }
    T mx = T(-INFINITY);
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < C; ++j) mx = yr[j] > mx ? yr[j] : mx;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) yr[j] -= mx;
    exp_nonpos(yr, C);
    const T inv = T(1.0 / lane_sum(C, [&](int64_t j) { return yr[j]; }));
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) yr[j] *= inv;
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
}  // namespace

void register_transformer_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(embedding_forward_kernels(), embedding_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(embedding_backward_kernels(), embedding_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(layer_norm_forward_kernels(), layer_norm_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(layer_norm_backward_kernels(), layer_norm_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(gelu_forward_kernels(), gelu_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(gelu_backward_kernels(), gelu_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(masked_softmax_forward_kernels(), masked_softmax_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(masked_softmax_backward_kernels(), masked_softmax_backward_cpu);
}

}  // namespace oomlab
