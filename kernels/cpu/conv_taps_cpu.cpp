// conv_taps_cpu.cpp — small-plane NCHW conv2d as GEMMs over in-bounds taps (see
// conv_taps_cpu.h). The batch is cut into tiles of whole images (at most kMaxCols output
// columns; the count from the shapes alone). A tile is copied pixel-major (image index
// fastest: xt [C][H][W][L], dyt [K][P][Q][L], L images), so that for tap t = (r, s) and
// output row p the in-bounds pixels q in [lo, hi) read input row ih at columns
// iw_lo + j*sw: with stride 1 a contiguous [C, (hi-lo)*L] block of xt, a strided one
// (gathered) otherwise. Such a (tap, row) pair is a segment. With the weights permuted to
// wt [R*S][K][C] (tap t's [K, C] matrix contiguous):
//   forward:         yt[k, p, lo:hi, :] += wt_t * xt[:, ih, iw...]   segments in order
//   backward data:   dxt[c, ih, iw..., :] += wt_t^T * dyt[:, p, lo:hi, :]
//   backward weight: dwt_t = dyt_t * xt_t^T over tap t's segments gathered side by side
// OpenMP runs over work items fixed by the shapes: (output row, filter chunk) forward,
// (input row, channel chunk) backward data, (tap, filter chunk) backward weight; an item's
// sums run in segment order (taps in order), tiles in order.
#include "kernels/cpu/conv_taps_cpu.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/core/thread_budget.h"
#include "kernels/cpu/conv_nhwc_cpu.h"   // conv_tile_gemm
#include "kernels/cpu/conv_threads.h"
#include "kernels/cpu/thread_scratch.h"

namespace oomlab {
namespace {

// Which convs take this path (conv_taps_applies): planes of at most 64 pixels where enough
// of im2col's products are with padding, from bench_conv's conv_ab A/B runs against im2col;
// the rule depends on the GEMM the float tiles run on (conv_cpu.cpp's use_own_sgemm).
// OpenBLAS (AVX2 CPUs; float64 everywhere), on the 2-core Zen 3 VM: at least a quarter
// padded (ResNet's 2x2 and 4x4 stages: 0.39-0.75x the time), or stride 1 with at most 2304
// (256 channels x 3x3) products per output (8x8 and 7x7 at 96-256 channels: 0.85-0.99x);
// 512 channels at 7x7 or 8x8 (1.06-1.09x) and the 8x8 -> 4x4 stride-2 conv (1.05x) stay on
// im2col. The own AVX-512 sgemm, on the 2-core Zen 5 VM (reports/benchmarks/
// cpu_bench_conv_taps.json, 5 repetitions; the session's other runs in the message of the
// commit that made this rule): a quarter padded wins as well (2x2/512c 0.60-0.64x, 4x4/256c
// 0.86-0.89x), and so does an eighth at up to 2304 products, stride 2 included (8x8/128c
// 0.88-0.89x, 8x8 -> 4x4 median 0.95x); 512 channels at 7x7 and 8x8 (16-18% padded) are at
// parity (0.86-1.05x over seven runs, 0.94-1.12x over six) and stay on im2col, as do 9%
// padded or less (14x14 -> 7x7 and 16x16 -> 8x8 stride 2: 1.03-1.25x) and the unpadded
// convs the OpenBLAS rule gives the taps (10x10 -> 8x8: 1.04-1.07x).
constexpr int64_t kMaxPQ = 64;
constexpr double kMinPaddedShare = 0.25;            // either GEMM
constexpr int64_t kMaxReduction = 2304;
constexpr double kMinPaddedShareOwnSgemm = 0.125;   // own AVX-512 sgemm, C*R*S <= kMaxReduction
constexpr int64_t kMaxCols = 2048;     // images per tile * P*Q
constexpr int64_t kChunkRows = 256;    // channels per OpenMP work item

// Output pixels (p, lo..hi-1) through tap t read input row ih, columns iw_lo + j*sw.
struct Segment { int64_t t, p, lo, hi, ih, iw_lo; };

struct TapGeom {
  int64_t N, C, H, W, K, RS, P, Q, HW, PQ, sw;
  int64_t nb, ntiles;          // images per tile, tiles
  int nt;                      // OpenMP threads
  std::vector<Segment> segs;   // tap-major, rows in order
  std::vector<int64_t> first;  // segs of tap t: [first[t], first[t + 1])
  // Segment indices by output row p (taps in order) and by input row ih (segs order), with
  // the ranges of each row: out_order[out_first[p] .. out_first[p + 1]), likewise in_*.
  std::vector<int64_t> out_order, out_first, in_order, in_first;
};

// order[first[v] .. first[v + 1]) = the indices of segs with key(seg) == v, in segs order.
template <class Key>
void index_by(const std::vector<Segment>& segs, int64_t values, Key key, std::vector<int64_t>& order,
              std::vector<int64_t>& first) {
  first.assign(size_t(values + 1), 0);
  for (const Segment& e : segs) ++first[size_t(key(e) + 1)];
  for (int64_t v = 0; v < values; ++v) first[size_t(v + 1)] += first[size_t(v)];
  order.assign(segs.size(), 0);
  std::vector<int64_t> next(first.begin(), first.end() - 1);
  for (size_t i = 0; i < segs.size(); ++i) order[size_t(next[size_t(key(segs[i]))]++)] = int64_t(i);
}

TapGeom make_geom(const Conv2dArgs& a) {
  TapGeom g;
  g.N = a.N; g.C = a.C; g.H = a.H; g.W = a.W; g.K = a.K; g.RS = a.R * a.S; g.P = a.P; g.Q = a.Q;
  g.HW = a.H * a.W; g.PQ = a.P * a.Q; g.sw = a.p.stride_w;
  const Conv2dParams& c = a.p;
  int64_t pixels = 0;
  for (int64_t t = 0; t < g.RS; ++t) {
    g.first.push_back(int64_t(g.segs.size()));
    const int64_t r = t / a.S, s = t % a.S, iw0 = s * c.dil_w - c.pad_w;
    const int64_t lo = iw0 >= 0 ? 0 : (-iw0 + c.stride_w - 1) / c.stride_w;
    const int64_t hi = iw0 > a.W - 1 ? 0 : std::min(a.Q, (a.W - 1 - iw0) / c.stride_w + 1);
    if (lo >= hi) continue;
    for (int64_t p = 0; p < a.P; ++p) {
      const int64_t ih = p * c.stride_h - c.pad_h + r * c.dil_h;
      if (ih < 0 || ih >= a.H) continue;
      g.segs.push_back({t, p, lo, hi, ih, iw0 + lo * c.stride_w});
      pixels += hi - lo;
    }
  }
  g.first.push_back(int64_t(g.segs.size()));
  index_by(g.segs, g.P, [](const Segment& e) { return e.p; }, g.out_order, g.out_first);
  index_by(g.segs, g.H, [](const Segment& e) { return e.ih; }, g.in_order, g.in_first);
  g.nb = std::clamp<int64_t>(kMaxCols / std::max<int64_t>(g.PQ, 1), 1, std::max<int64_t>(g.N, 1));
  g.ntiles = (g.N + g.nb - 1) / g.nb;
  const double flops = 2.0 * double(g.N) * double(g.K) * double(g.C) * double(pixels);
  g.nt = conv_omp_threads(flops);
  return g;
}

// Scratch slots (thread_scratch.h): 0-3 the calling thread's buffers shared with the workers,
// 4 a worker's own panel.
struct TapsFamily;
template <class T> T* scratch(int slot, size_t n) { return thread_scratch<T, TapsFamily, 5>(slot, n); }

// dst[(c*HW + i)*L + l] = src[((n0 + l)*C + c)*HW + i], l < L.
template <class T> void to_pixel_major(const T* src, int64_t n0, int64_t L, int64_t C, int64_t HW, T* dst, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t c = 0; c < C; ++c)
    for (int64_t l = 0; l < L; ++l) {
      const T* s = src + ((n0 + l) * C + c) * HW;
      T* d = dst + c * HW * L + l;
      for (int64_t i = 0; i < HW; ++i) d[i * L] = s[i];
    }
}
template <class T> void from_pixel_major(const T* src, int64_t n0, int64_t L, int64_t C, int64_t HW, T* dst, int nt) {
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t c = 0; c < C; ++c)
    for (int64_t l = 0; l < L; ++l) {
      const T* s = src + c * HW * L + l;
      T* d = dst + ((n0 + l) * C + c) * HW;
      for (int64_t i = 0; i < HW; ++i) d[i] = s[i * L];
    }
}

// wt[(t*K + k)*C + c] = w[(k*C + c)*RS + t] (to_tap_major), and back (from_tap_major).
template <class T> void to_tap_major(const T* w, const TapGeom& g, T* wt) {
#pragma omp parallel for schedule(static) num_threads(g.nt) if (g.nt > 1)
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t t = 0; t < g.RS; ++t) {
      const T* src = w + k * g.C * g.RS + t;
      T* dst = wt + (t * g.K + k) * g.C;
      for (int64_t c = 0; c < g.C; ++c) dst[c] = src[c * g.RS];
    }
}
// a's weights tap-major in the calling thread's scratch slot 0 (read by the workers).
template <class T> const T* tap_major_weights(const Conv2dArgs& a, const TapGeom& g) {
  T* wt = scratch<T>(0, size_t(g.RS * g.K * g.C));
  to_tap_major(static_cast<const T*>(a.w), g, wt);
  return wt;
}
template <class T> void from_tap_major(const T* wt, const TapGeom& g, T* w) {
#pragma omp parallel for schedule(static) num_threads(g.nt) if (g.nt > 1)
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t t = 0; t < g.RS; ++t) {
      const T* src = wt + (t * g.K + k) * g.C;
      T* dst = w + k * g.C * g.RS + t;
      for (int64_t c = 0; c < g.C; ++c) dst[c * g.RS] = src[c];
    }
}

// Rows [c0, c1) of segment e's input block of the pixel-major tile xt (L images):
// *ld is its leading dimension. Stride 1 points into xt; otherwise gathered into panel.
template <class T>
const T* input_block(const TapGeom& g, const Segment& e, const T* xt, int64_t L, int64_t c0, int64_t c1, T* panel,
                     int64_t* ld) {
  const int64_t n = e.hi - e.lo;
  if (g.sw == 1) { *ld = g.HW * L; return xt + c0 * g.HW * L + (e.ih * g.W + e.iw_lo) * L; }
  *ld = n * L;
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(panel + (c - c0) * n * L + j * L, xt + (c * g.HW + e.ih * g.W + e.iw_lo + j * g.sw) * L,
                  size_t(L) * sizeof(T));
  return panel;
}

// Pairs (output index, kernel index) of one dimension whose input index is in [0, size).
int64_t in_bounds_pairs(int64_t out, int64_t stride, int64_t pad, int64_t dil, int64_t taps, int64_t size) {
  int64_t n = 0;
  for (int64_t r = 0; r < taps; ++r)
    for (int64_t o = 0; o < out; ++o) {
      const int64_t i = o * stride - pad + r * dil;
      n += i >= 0 && i < size;
    }
  return n;
}

int64_t chunks(int64_t rows) { return (rows + kChunkRows - 1) / kChunkRows; }

}  // namespace

bool conv_taps_supported(const Conv2dArgs& a) {
  return !a.channels_last && a.p.groups == 1 && a.R * a.S > 1 && a.P * a.Q <= kMaxPQ && a.N > 0 && a.C > 0 &&
         a.K > 0 && a.P > 0 && a.Q > 0;
}

double conv_padded_share(const Conv2dArgs& a) {
  const Conv2dParams& p = a.p;
  const double in_bounds = double(in_bounds_pairs(a.P, p.stride_h, p.pad_h, p.dil_h, a.R, a.H)) *
                           double(in_bounds_pairs(a.Q, p.stride_w, p.pad_w, p.dil_w, a.S, a.W));
  return 1.0 - in_bounds / double(a.P * a.Q * a.R * a.S);
}

bool conv_taps_applies(const Conv2dArgs& a, bool own_avx512_sgemm) {
  if (!conv_taps_supported(a)) return false;
  const double padded = conv_padded_share(a);
  if (padded >= kMinPaddedShare) return true;
  if (a.C * a.R * a.S > kMaxReduction) return false;
  return own_avx512_sgemm ? padded >= kMinPaddedShareOwnSgemm : a.p.stride_h == 1 && a.p.stride_w == 1;
}

template <class T> void conv_taps_forward(const Conv2dArgs& a) {
  const TapGeom g = make_geom(a);
  BlasThreadsGuard serial_blas{1};
  const T* wt = tap_major_weights<T>(a, g);
  for (int64_t ti = 0; ti < g.ntiles; ++ti) {
    const int64_t n0 = ti * g.nb, L = std::min(g.nb, g.N - n0), ldy = g.PQ * L;
    T* xt = scratch<T>(1, size_t(g.C * g.HW * L));
    T* yt = scratch<T>(2, size_t(g.K * ldy));
    to_pixel_major(static_cast<const T*>(a.x), n0, L, g.C, g.HW, xt, g.nt);
    const int64_t nch = chunks(g.K);
#pragma omp parallel for schedule(dynamic, 1) num_threads(g.nt) if (g.nt > 1)
    for (int64_t item = 0; item < g.P * nch; ++item) {   // (output row, filter chunk)
      const int64_t p = item / nch, m0 = (item % nch) * kChunkRows, m1 = std::min(g.K, m0 + kChunkRows);
      for (int64_t m = m0; m < m1; ++m) std::fill_n(yt + m * ldy + p * g.Q * L, g.Q * L, T(0));
      for (int64_t i = g.out_first[p]; i < g.out_first[p + 1]; ++i) {
        const Segment& e = g.segs[g.out_order[i]];
        int64_t ldb = 0;
        const T* b = input_block(g, e, xt, L, 0, g.C, scratch<T>(4, size_t(g.C * (e.hi - e.lo) * L)), &ldb);
        conv_tile_gemm(false, false, m1 - m0, (e.hi - e.lo) * L, g.C, wt + (e.t * g.K + m0) * g.C, g.C, b, ldb,
                       T(1), yt + m0 * ldy + (e.p * g.Q + e.lo) * L, ldy);
      }
    }
    from_pixel_major(yt, n0, L, g.K, g.PQ, static_cast<T*>(a.y), g.nt);
  }
}

template <class T> void conv_taps_backward_data(const Conv2dArgs& a) {
  const TapGeom g = make_geom(a);
  BlasThreadsGuard serial_blas{1};
  const T* wt = tap_major_weights<T>(a, g);
  for (int64_t ti = 0; ti < g.ntiles; ++ti) {
    const int64_t n0 = ti * g.nb, L = std::min(g.nb, g.N - n0), ldy = g.PQ * L, ldx = g.HW * L;
    T* dyt = scratch<T>(1, size_t(g.K * ldy));
    T* dxt = scratch<T>(2, size_t(g.C * ldx));
    to_pixel_major(static_cast<const T*>(a.dy), n0, L, g.K, g.PQ, dyt, g.nt);
    const int64_t nch = chunks(g.C);
#pragma omp parallel for schedule(dynamic, 1) num_threads(g.nt) if (g.nt > 1)
    for (int64_t item = 0; item < g.H * nch; ++item) {   // (input row, channel chunk)
      const int64_t ih = item / nch, c0 = (item % nch) * kChunkRows, c1 = std::min(g.C, c0 + kChunkRows);
      const int64_t m = c1 - c0;
      for (int64_t c = c0; c < c1; ++c) std::fill_n(dxt + c * ldx + ih * g.W * L, g.W * L, T(0));
      for (int64_t i = g.in_first[ih]; i < g.in_first[ih + 1]; ++i) {
        const Segment& e = g.segs[g.in_order[i]];
        const int64_t n = e.hi - e.lo;
        const T* b = dyt + (e.p * g.Q + e.lo) * L;
        const T* at = wt + e.t * g.K * g.C + c0;   // wt_t's columns c0..c1: op(A) = A^T
        T* dst = dxt + c0 * ldx + (e.ih * g.W + e.iw_lo) * L;
        if (g.sw == 1) { conv_tile_gemm(true, false, m, n * L, g.K, at, g.C, b, ldy, T(1), dst, ldx); continue; }
        T* z = scratch<T>(4, size_t(m * n * L));
        conv_tile_gemm(true, false, m, n * L, g.K, at, g.C, b, ldy, T(0), z, n * L);
        for (int64_t c = 0; c < m; ++c)
          for (int64_t j = 0; j < n; ++j)
            for (int64_t l = 0; l < L; ++l) dst[c * ldx + j * g.sw * L + l] += z[(c * n + j) * L + l];
      }
    }
    from_pixel_major(dxt, n0, L, g.C, g.HW, static_cast<T*>(a.dx), g.nt);
  }
}

template <class T> void conv_taps_backward_weight(const Conv2dArgs& a) {
  const TapGeom g = make_geom(a);
  BlasThreadsGuard serial_blas{1};
  T* dwt = scratch<T>(0, size_t(g.RS * g.K * g.C));
  std::fill(dwt, dwt + g.RS * g.K * g.C, T(0));   // taps no output pixel reaches keep 0
  for (int64_t ti = 0; ti < g.ntiles; ++ti) {
    const int64_t n0 = ti * g.nb, L = std::min(g.nb, g.N - n0), ldy = g.PQ * L;
    T* xt = scratch<T>(1, size_t(g.C * g.HW * L));
    T* dyt = scratch<T>(2, size_t(g.K * ldy));
    to_pixel_major(static_cast<const T*>(a.x), n0, L, g.C, g.HW, xt, g.nt);
    to_pixel_major(static_cast<const T*>(a.dy), n0, L, g.K, g.PQ, dyt, g.nt);
    // Tap t's segments side by side: dyp_t [K, cols_t] and xp_t [C, cols_t] at column offset off[t].
    std::vector<int64_t> off(size_t(g.RS + 1), 0);
    for (int64_t t = 0; t < g.RS; ++t) {
      int64_t cols = 0;
      for (int64_t e = g.first[t]; e < g.first[t + 1]; ++e) cols += (g.segs[e].hi - g.segs[e].lo) * L;
      off[t + 1] = off[t] + cols;
    }
    T* dyp = scratch<T>(3, size_t(std::max<int64_t>(g.K * off[g.RS], 1)));
    T* xp = scratch<T>(4, size_t(std::max<int64_t>(g.C * off[g.RS], 1)));
#pragma omp parallel for schedule(dynamic, 1) num_threads(g.nt) if (g.nt > 1)
    for (int64_t t = 0; t < g.RS; ++t) {
      const int64_t cols = off[t + 1] - off[t];
      T* dp = dyp + g.K * off[t];
      T* xq = xp + g.C * off[t];
      for (int64_t e = g.first[t], j0 = 0; e < g.first[t + 1]; j0 += (g.segs[e].hi - g.segs[e].lo) * L, ++e) {
        const Segment& s = g.segs[e];
        const int64_t n = (s.hi - s.lo) * L;
        for (int64_t k = 0; k < g.K; ++k)
          std::memcpy(dp + k * cols + j0, dyt + k * ldy + (s.p * g.Q + s.lo) * L, size_t(n) * sizeof(T));
        for (int64_t c = 0; c < g.C; ++c)
          for (int64_t j = 0; j < s.hi - s.lo; ++j)
            std::memcpy(xq + c * cols + j0 + j * L, xt + (c * g.HW + s.ih * g.W + s.iw_lo + j * g.sw) * L,
                        size_t(L) * sizeof(T));
      }
    }
    const int64_t nch = chunks(g.K);
#pragma omp parallel for schedule(dynamic, 1) num_threads(g.nt) if (g.nt > 1)
    for (int64_t item = 0; item < g.RS * nch; ++item) {
      const int64_t t = item / nch, m0 = (item % nch) * kChunkRows, m1 = std::min(g.K, m0 + kChunkRows);
      const int64_t cols = off[t + 1] - off[t];
      if (cols == 0) continue;
      conv_tile_gemm(false, true, m1 - m0, g.C, cols, dyp + g.K * off[t] + m0 * cols, cols, xp + g.C * off[t], cols,
                     T(1), dwt + (t * g.K + m0) * g.C, g.C);
    }
  }
  from_tap_major(dwt, g, static_cast<T*>(a.dw));
}

template void conv_taps_forward<float>(const Conv2dArgs&);
template void conv_taps_forward<double>(const Conv2dArgs&);
template void conv_taps_backward_data<float>(const Conv2dArgs&);
template void conv_taps_backward_data<double>(const Conv2dArgs&);
template void conv_taps_backward_weight<float>(const Conv2dArgs&);
template void conv_taps_backward_weight<double>(const Conv2dArgs&);

}  // namespace oomlab
