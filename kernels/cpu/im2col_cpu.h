// im2col_cpu.h — the tiling and im2col/col2im of conv_cpu.cpp's NCHW im2col + GEMM path
// (included by conv_cpu.cpp alone; float and double). make_geom cuts the output-pixel space
// (image-major) into column tiles fixed by the shapes alone: slices of one image when P*Q is
// large, else groups of whole images, keeping a tile's col panel [C*R*S, cols] cache-sized.
// im2col writes col[row - row0, coff + j] (rows c*R*S + r*S + s, zero in the padding);
// col2im_add adds a dcol panel back into dx in a fixed order (bitwise reproducible). Planes of
// at most kGatherMaxPQ pixels gather and scatter through a tap table built by make_geom,
// thread-local to the calling thread and read-only for the OpenMP workers of its call.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/conv.h"
#include "kernels/cpu/conv_threads.h"

namespace oomlab::conv_tiles {

constexpr int64_t kPanelBytes = 512 << 10;   // target col-panel size (per-core L2); 256K-2M measured
constexpr int64_t kMinCols = 192, kMaxCols = 2048;
constexpr int64_t kMinTiles = 8;      // work items for the OpenMP loops when N allows
constexpr int64_t kGatherMaxPQ = 64;  // output planes up to 8x8 im2col through a tap table

struct Geom {
  int64_t N, C, H, W, K, R, S, P, Q, G, Cg, Kg, CRS, CRSg, HW, PQ;
  int64_t sh, sw, ph, pw, dh, dw;
  bool direct;     // 1x1, stride 1, no padding: col rows of an image are x itself
  int64_t nb;      // images per tile (> 1 only when whole images fit in a tile)
  int64_t cols;    // tile width when nb == 1 (the last tile of an image may be narrower)
  int64_t per_img; // tiles per image when nb == 1
  int64_t ntiles;
  int nt;          // OpenMP threads for this call (1 for small problems)
  // Small output planes (PQ <= kGatherMaxPQ): taps[(r*S + s)*PQ + pq] = the input offset in a
  // channel plane that output pixel pq reads through tap (r, s), -1 in the padding. im2col
  // gathers through it (the row-by-row copies cost more in bookkeeping than in bytes there).
  // Thread-local to the calling thread, read-only for the OpenMP workers of the call.
  const int32_t* taps = nullptr;
};

// min_tiles: forward and backward data run their OpenMP loops over tiles (kMinTiles);
// backward weight runs it over col-row slices, and wider tiles make its GEMMs' K longer (1).
template <class T> Geom make_geom(const Conv2dArgs& a, int64_t min_tiles = kMinTiles) {
  Geom g{};
  g.N = a.N; g.C = a.C; g.H = a.H; g.W = a.W; g.K = a.K; g.R = a.R; g.S = a.S; g.P = a.P; g.Q = a.Q;
  g.G = a.p.groups; g.Cg = a.C / g.G; g.Kg = a.K / g.G;
  g.CRSg = g.Cg * a.R * a.S; g.CRS = g.CRSg * g.G; g.HW = a.H * a.W; g.PQ = a.P * a.Q;
  g.sh = a.p.stride_h; g.sw = a.p.stride_w; g.ph = a.p.pad_h; g.pw = a.p.pad_w;
  g.dh = a.p.dil_h; g.dw = a.p.dil_w;
  g.direct = a.R == 1 && a.S == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
  int64_t target = kPanelBytes / int64_t(sizeof(T)) / std::max<int64_t>(g.CRS, 1);
  target = std::clamp(target, kMinCols, kMaxCols);
  if (g.PQ >= target) {
    g.nb = 1;
    g.per_img = (g.PQ + target - 1) / target;
    g.cols = (g.PQ + g.per_img - 1) / g.per_img;
    g.ntiles = g.N * g.per_img;
  } else {
    g.nb = std::clamp<int64_t>(target / std::max<int64_t>(g.PQ, 1), 1, std::max<int64_t>(g.N, 1));
    // Late ResNet stages (2x2 or 4x4 pixels, thousands of col rows) would fit the whole batch
    // in one or two tiles, i.e. one thread: keep at least kMinTiles tiles when the batch has
    // the images (a rule on the shapes alone, so the bits never depend on the thread count).
    g.nb = std::min(g.nb, std::max<int64_t>(1, (g.N + min_tiles - 1) / min_tiles));
    g.per_img = 1;
    g.cols = g.PQ;
    g.ntiles = (g.N + g.nb - 1) / g.nb;
  }
  const double flops = 2.0 * double(g.N * g.K * g.PQ) * double(g.CRSg);
  g.nt = conv_omp_threads(flops);
  if (g.PQ <= kGatherMaxPQ && g.HW <= INT32_MAX) {
    thread_local std::vector<int32_t> table;
    table.resize(size_t(a.R * a.S * g.PQ));
    for (int64_t r = 0; r < a.R; ++r)
      for (int64_t s = 0; s < a.S; ++s)
        for (int64_t p = 0; p < a.P; ++p)
          for (int64_t q = 0; q < a.Q; ++q) {
            const int64_t ih = p * g.sh - g.ph + r * g.dh, iw = q * g.sw - g.pw + s * g.dw;
            table[size_t((r * a.S + s) * g.PQ + p * a.Q + q)] =
                ih >= 0 && ih < a.H && iw >= 0 && iw < a.W ? int32_t(ih * a.W + iw) : -1;
          }
    g.taps = table.data();
  }
  return g;
}

// A tile: images [n0, n0+nbc) and, when nbc == 1, pixels [pq0, pq1) of image n0.
struct Tile { int64_t n0, nbc, pq0, pq1; };
inline Tile tile_of(const Geom& g, int64_t t) {
  if (g.nb > 1) {
    const int64_t n0 = t * g.nb;
    return {n0, std::min(g.nb, g.N - n0), 0, g.PQ};
  }
  const int64_t n0 = t / g.per_img, pq0 = (t % g.per_img) * g.cols;
  return {n0, 1, pq0, std::min(g.PQ, pq0 + g.cols)};
}
inline int64_t tile_cols(const Geom& g, const Tile& t) { return t.nbc * (t.pq1 - t.pq0); }

// Output columns q in [lo, hi) read input column iw0 + q*sw inside [0, W).
inline void q_range(int64_t iw0, int64_t sw, int64_t W, int64_t Q, int64_t& lo, int64_t& hi) {
  lo = iw0 >= 0 ? 0 : (-iw0 + sw - 1) / sw;
  hi = iw0 > W - 1 ? 0 : (W - 1 - iw0) / sw + 1;
  lo = std::min(lo, Q);
  hi = std::max(lo, std::min(hi, Q));
}

// Visits the output pixels [pq0, pq1) of col row (c, r, s) row by row: f(p, q0, q1, ih, lo, hi, j0)
// with j0 the column of q = 0 (may be negative), [lo, hi) the in-bounds q's.
template <class F>
inline void for_row_pixels(const Geom& g, int64_t r, int64_t s, int64_t pq0, int64_t pq1, F f) {
  int64_t lo, hi;
  const int64_t iw0 = s * g.dw - g.pw;
  q_range(iw0, g.sw, g.W, g.Q, lo, hi);
  for (int64_t pq = pq0; pq < pq1;) {
    const int64_t p = pq / g.Q, q0 = pq % g.Q, q1 = std::min(g.Q, q0 + (pq1 - pq));
    f(p, q0, q1, p * g.sh - g.ph + r * g.dh, iw0, std::clamp(lo, q0, q1), std::clamp(hi, q0, q1),
      (pq - pq0) - q0);
    pq += q1 - q0;
  }
}

// Short-row helpers; SW is the stride when known at compile time (0: runtime `sw`).
template <int SW, class T> inline void copy_row(T* __restrict d, const T* __restrict src, int64_t n, int64_t sw) {
  const int64_t st = SW ? SW : sw;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = src[i * st];
}
template <int SW, class T> inline void add_row(T* __restrict d, const T* __restrict src, int64_t n, int64_t sw) {
  const int64_t st = SW ? SW : sw;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i * st] += src[i];
}
template <class T> inline void zero_row(T* d, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = T(0);
}

// col[row - row0, coff + j] for rows [row0, row1) and pixels [pq0, pq1) of image n.
template <int SW, class T>
void im2col_sw(const Geom& g, const T* x, int64_t n, int64_t pq0, int64_t pq1, int64_t row0, int64_t row1,
               T* col, int64_t ld, int64_t coff) {
  const int64_t RS = g.R * g.S;
  for (int64_t row = row0; row < row1; ++row) {
    const int64_t c = row / RS, r = (row / g.S) % g.R, s = row % g.S;
    const T* xp = x + (n * g.C + c) * g.HW;
    T* d = col + (row - row0) * ld + coff;
    for_row_pixels(g, r, s, pq0, pq1, [&](int64_t, int64_t q0, int64_t q1, int64_t ih, int64_t iw0,
                                          int64_t lo, int64_t hi, int64_t j0) {
      // d[j0 + q] is the slot of pixel (p, q); input column of q is iw0 + q*sw
      if (ih < 0 || ih >= g.H) { zero_row(d + j0 + q0, q1 - q0); return; }
      zero_row(d + j0 + q0, lo - q0);
      copy_row<SW>(d + j0 + lo, xp + ih * g.W + iw0 + lo * g.sw, hi - lo, g.sw);
      zero_row(d + j0 + hi, q1 - hi);
    });
  }
}
template <class T>
void im2col(const Geom& g, const T* x, int64_t n, int64_t pq0, int64_t pq1, int64_t row0, int64_t row1,
            T* col, int64_t ld, int64_t coff) {
  if (g.taps) {   // small planes: one gather per col row
    const int64_t RS = g.R * g.S;
    for (int64_t row = row0; row < row1; ++row) {
      const T* xp = x + (n * g.C + row / RS) * g.HW;
      const int32_t* t = g.taps + (row % RS) * g.PQ;
      T* d = col + (row - row0) * ld + coff - pq0;
      for (int64_t pq = pq0; pq < pq1; ++pq) d[pq] = t[pq] >= 0 ? xp[t[pq]] : T(0);
    }
    return;
  }
  if (g.sw == 1) im2col_sw<1>(g, x, n, pq0, pq1, row0, row1, col, ld, coff);
  else if (g.sw == 2) im2col_sw<2>(g, x, n, pq0, pq1, row0, row1, col, ld, coff);
  else im2col_sw<0>(g, x, n, pq0, pq1, row0, row1, col, ld, coff);
}

// dx[n] += col2im of dcol[:, coff + j] for pixels [pq0, pq1) (all C*R*S rows).
template <int SW, class T>
void col2im_add_sw(const Geom& g, const T* dcol, int64_t ld, int64_t coff, int64_t n, int64_t pq0,
                   int64_t pq1, T* dx) {
  for (int64_t c = 0; c < g.C; ++c) {
    T* xp = dx + (n * g.C + c) * g.HW;
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t s = 0; s < g.S; ++s) {
        const T* sp = dcol + ((c * g.R + r) * g.S + s) * ld + coff;
        for_row_pixels(g, r, s, pq0, pq1, [&](int64_t, int64_t, int64_t, int64_t ih, int64_t iw0,
                                              int64_t lo, int64_t hi, int64_t j0) {
          if (ih >= 0 && ih < g.H) add_row<SW>(xp + ih * g.W + iw0 + lo * g.sw, sp + j0 + lo, hi - lo, g.sw);
        });
      }
  }
}
template <class T>
void col2im_add(const Geom& g, const T* dcol, int64_t ld, int64_t coff, int64_t n, int64_t pq0,
                int64_t pq1, T* dx) {
  if (g.taps) {   // small planes: one scatter-add per col row, in the row-copy path's order
    const int64_t RS = g.R * g.S;
    for (int64_t row = 0; row < g.CRS; ++row) {
      T* xp = dx + (n * g.C + row / RS) * g.HW;
      const int32_t* t = g.taps + (row % RS) * g.PQ;
      const T* sp = dcol + row * ld + coff - pq0;
      for (int64_t pq = pq0; pq < pq1; ++pq)
        if (t[pq] >= 0) xp[t[pq]] += sp[pq];
    }
    return;
  }
  if (g.sw == 1) col2im_add_sw<1>(g, dcol, ld, coff, n, pq0, pq1, dx);
  else if (g.sw == 2) col2im_add_sw<2>(g, dcol, ld, coff, n, pq0, pq1, dx);
  else col2im_add_sw<0>(g, dcol, ld, coff, n, pq0, pq1, dx);
}

// panel[k, i*PQ + pq] = dy[n0+i, k, pq]
template <class T> void gather_dy(const Geom& g, const T* dy, const Tile& t, T* panel) {
  const int64_t ld = t.nbc * g.PQ;
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t i = 0; i < t.nbc; ++i)
      std::memcpy(panel + k * ld + i * g.PQ, dy + ((t.n0 + i) * g.K + k) * g.PQ, size_t(g.PQ) * sizeof(T));
}

}  // namespace oomlab::conv_tiles
