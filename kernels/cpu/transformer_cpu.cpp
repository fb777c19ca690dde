// transformer_cpu.cpp — CPU kernels for embedding and layer_norm (forward and backward,
// float32 and float64); arg structs in engine/ops/transformer_kernels.h.
// Threading: OpenMP, static schedule. Row-wise work (embedding gather, layer_norm
// normalisation and dx) runs over rows; column reductions (embedding
// weight grad, layer_norm dweight / dbias) run over fixed 64-column blocks and add rows
// in row order, so no result depends on the thread count and there are no atomics.
// Row sums accumulate in double over 8 fixed lanes (lane_sum, fast_math.h).
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
}  // namespace

void register_transformer_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(embedding_forward_kernels(), embedding_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(embedding_backward_kernels(), embedding_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(layer_norm_forward_kernels(), layer_norm_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(layer_norm_backward_kernels(), layer_norm_backward_cpu);
}

}  // namespace oomlab
