// conv_cpu.cpp — CPU kernels of the conv family (kernels/conv.h; float, double): conv2d
// by tiled im2col + GEMM, plus NCHW channel-bias add / grad. The output-pixel space
// (image-major) is cut into column tiles fixed by the shapes alone: slices of one image
// when P*Q is large, else groups of whole images. A tile's col panel [C*R*S, cols] stays
// cache-sized; group g owns col rows [g*CRSg, (g+1)*CRSg). 1x1 / stride 1 / pad 0 convs
// read x directly (no im2col).
//   forward:         y_g = W_g * col_g              (OpenMP over tiles)
//   backward data:   dcol_g = W_g^T * dY_g; col2im  (OpenMP over images: no write races)
//   backward weight: dW[:, rows] (+)= dY * col[rows]^T (OpenMP over col-row slices, each
//                    slice sums the tiles in tile order: bitwise independent of threads)
// Float 3x3 convs with small channel counts (conv_direct_applies: the ResNet-20 shapes)
// take the direct kernels of conv_direct_cpu.cpp instead; the choice depends on the
// shapes only; small output planes (conv_taps_applies) take conv_taps_cpu.cpp's per-tap
// GEMMs (no products with padding). channels_last buffers go to conv_nhwc_cpu.cpp.
// Threading is one level: OpenMP outside, single-threaded OpenBLAS inside (set for the
// call, restored after). Scratch panels are thread-local host buffers (kernel-private, not
// device memory; grow-only).
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/core/thread_budget.h"
#include "engine/memory/kernel_choices.h"
#include "kernels/conv.h"
#include "kernels/cpu/half_widen.h"
#include "kernels/cpu/conv_direct_cpu.h"
#include "kernels/cpu/conv_nhwc_cpu.h"
#include "kernels/cpu/conv_taps_cpu.h"
#include "kernels/cpu/sgemm_avx512.h"
#include "kernels/cpu/thread_scratch.h"

extern "C" char* openblas_get_corename(void);

namespace oomlab {
namespace {

constexpr int64_t kPanelBytes = 512 << 10;   // target col-panel size (per-core L2); 256K-2M measured
constexpr int64_t kMinCols = 192, kMaxCols = 2048;
constexpr int64_t kMinTiles = 8;
constexpr int64_t kGatherMaxPQ = 64;  // output planes up to 8x8 im2col through a tap table              // work items
                                      // for the OpenMP loops when N allows
constexpr double kParallelFlops = 4e6;        // below this, one thread (no OpenMP region)

// The tiles' float GEMMs run on sgemm_avx512.h where the CPU has AVX-512 but OpenBLAS runs
// AVX2 kernels (its core type is not an AVX-512 one): single-threaded conv-tile shapes
// measured 1.1-1.9x faster than OpenBLAS's Haswell sgemm on the 2-core AVX-512 VM (the
// ResNet-18 layer GEMMs). Decided once per process, from the CPU and OpenBLAS alone.
bool use_own_sgemm() {
  static const bool own = [] {
    const std::string core = openblas_get_corename();
    const bool blas_avx512 = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
    return sgemm_avx512_available() && !blas_avx512;
  }();
  return own;
}

template <class T>
void blas_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda,
               const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  OOMLAB_ASSERT(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
                ldc <= INT_MAX);
  const auto ta_ = ta ? CblasTrans : CblasNoTrans, tb_ = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    if (use_own_sgemm()) return sgemm_avx512(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    cblas_sgemm(CblasRowMajor, ta_, tb_, int(M), int(N), int(K), 1.0f, A, int(lda), B, int(ldb), beta,
                C, int(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta_, tb_, int(M), int(N), int(K), 1.0, A, int(lda), B, int(ldb), beta,
                C, int(ldc));
  }
}

// One level of parallelism: OpenBLAS always runs single-threaded inside the conv kernels
// (OpenMP over tiles is the only threading). Multi-threaded OpenBLAS may pick other
// kernels / splits and change the bits, so letting it thread when OpenMP has one thread
// made results depend on the thread count. OpenBLAS's thread count is process-wide: the
// guard (engine/core/thread_budget.h) keeps it at 1 while any conv runs, on any thread.
struct SerialBlas {
  BlasThreadsGuard guard{1};
};

// Scratch slots (thread_scratch.h): 0 the col/dcol panel, 1 the gathered dY panel, 2 the calling
// thread's packed weights for the own GEMM, read by the OpenMP workers.
struct Im2colFamily;
template <class T> T* scratch(int slot, size_t n) { return thread_scratch<T, Im2colFamily, 3>(slot, n); }

// The weights of every group packed once for the own GEMM (use_own_sgemm), trans: W^T
// (backward data); null for double or when OpenBLAS runs the tiles.
template <class T>
const float* pack_weights(const T* w, int64_t G, int64_t Kg, int64_t CRSg, bool trans, int64_t& size) {
  if constexpr (!std::is_same_v<T, float>) {
    return nullptr;
  } else {
    if (!use_own_sgemm()) return nullptr;
    const int64_t M = trans ? CRSg : Kg, K = trans ? Kg : CRSg;
    size = sgemm_avx512_packed_a_size(M, K);
    float* p = scratch<float>(2, size_t(std::max<int64_t>(G * size, 1)));
    for (int64_t gi = 0; gi < G; ++gi) sgemm_avx512_pack_a(trans, M, K, w + gi * Kg * CRSg, CRSg, p + gi * size);
    return p;
  }
}

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

// The path a call takes, for kernel_choices.h: the direct 3x3 kernels, or im2col (none for
// 1x1 stride-1 unpadded convolutions) and a GEMM.
template <class T> void note_path(const char* op, bool direct_kernel, const Geom* g = nullptr) {
  if (direct_kernel) return note_kernel_choice(op, "direct 3x3 kernels");
  const char* gemm =
      !std::is_same_v<T, float> ? "OpenBLAS dgemm" : (use_own_sgemm() ? "own AVX-512 sgemm" : "OpenBLAS sgemm");
  note_kernel_choice(op, std::string(g && g->direct ? "1x1 GEMM on x, " : "im2col + ") + gemm);
}

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
  g.nt = omp_in_parallel() || flops < kParallelFlops ? 1 : omp_get_max_threads();
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
Tile tile_of(const Geom& g, int64_t t) {
  if (g.nb > 1) {
    const int64_t n0 = t * g.nb;
    return {n0, std::min(g.nb, g.N - n0), 0, g.PQ};
  }
  const int64_t n0 = t / g.per_img, pq0 = (t % g.per_img) * g.cols;
  return {n0, 1, pq0, std::min(g.PQ, pq0 + g.cols)};
}
int64_t tile_cols(const Geom& g, const Tile& t) { return t.nbc * (t.pq1 - t.pq0); }

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

template <class T> void conv2d_forward_cpu(const Conv2dArgs& a) {
  if (a.channels_last) return conv2d_forward_nhwc<T>(a);   // kernels/cpu/conv_nhwc_cpu.cpp
  if constexpr (std::is_same_v<T, float>)
    if (conv_direct_applies(a)) {
      note_path<T>("conv2d_forward", true);
      return conv_direct_forward(a);
    }
  if (conv_taps_applies(a)) {
    note_kernel_choice("conv2d_forward", "tap GEMMs (small planes)");
    return conv_taps_forward<T>(a);
  }
  const Geom g = make_geom<T>(a);
  note_path<T>("conv2d_forward", false, &g);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  T* y = static_cast<T*>(a.y);
  SerialBlas serial;
  int64_t wsize = 0;
  const float* wpk = pack_weights(w, g.G, g.Kg, g.CRSg, false, wsize);
#pragma omp parallel for schedule(dynamic, 1) num_threads(g.nt) if (g.nt > 1)
  for (int64_t ti = 0; ti < g.ntiles; ++ti) {
    const Tile t = tile_of(g, ti);
    const int64_t L = tile_cols(g, t);
    const T* col;   // [CRS, L] with leading dimension ldb
    int64_t ldb = L;
    if (g.direct && t.nbc == 1) { col = x + t.n0 * g.C * g.HW + t.pq0; ldb = g.HW; }
    else {
      T* c = scratch<T>(0, size_t(g.CRS * L));
      for (int64_t i = 0; i < t.nbc; ++i) im2col(g, x, t.n0 + i, t.pq0, t.pq1, 0, g.CRS, c, L, i * g.PQ);
      col = c;
    }
    // nbc == 1: write straight into y[n0, :, pq0:pq1]; else into a panel, then scatter.
    T* out = t.nbc == 1 ? y + t.n0 * g.K * g.PQ + t.pq0 : scratch<T>(1, size_t(g.K * L));
    const int64_t ldc = t.nbc == 1 ? g.PQ : L;
    for (int64_t gi = 0; gi < g.G; ++gi) {
      if constexpr (std::is_same_v<T, float>)
        if (wpk) {
          sgemm_avx512_packed(false, wpk + gi * wsize, g.Kg, g.CRSg, false, L, col + gi * g.CRSg * ldb, ldb, 0.f,
                              out + gi * g.Kg * ldc, ldc);
          continue;
        }
      blas_gemm<T>(false, false, g.Kg, L, g.CRSg, w + gi * g.Kg * g.CRSg, g.CRSg, col + gi * g.CRSg * ldb,
                   ldb, T(0), out + gi * g.Kg * ldc, ldc);
    }
    if (t.nbc > 1)
      for (int64_t k = 0; k < g.K; ++k)
        for (int64_t i = 0; i < t.nbc; ++i)
          std::memcpy(y + ((t.n0 + i) * g.K + k) * g.PQ, out + k * L + i * g.PQ, size_t(g.PQ) * sizeof(T));
  }
}

template <class T> void conv2d_backward_data_cpu(const Conv2dArgs& a) {
  if (a.channels_last) return conv2d_backward_data_nhwc<T>(a);   // kernels/cpu/conv_nhwc_cpu.cpp
  if constexpr (std::is_same_v<T, float>)
    if (conv_direct_applies(a)) {
      note_path<T>("conv2d_backward_data", true);
      return conv_direct_backward_data(a);
    }
  if (conv_taps_applies(a)) {
    note_kernel_choice("conv2d_backward_data", "tap GEMMs (small planes)");
    return conv_taps_backward_data<T>(a);
  }
  const Geom g = make_geom<T>(a);
  note_path<T>("conv2d_backward_data", false, &g);
  const T* w = static_cast<const T*>(a.w);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
  SerialBlas serial;
  int64_t wsize = 0;
  const float* wpk = pack_weights(w, g.G, g.Kg, g.CRSg, true, wsize);   // W^T per group
  // Work item: all tiles of a set of whole images (col2im of neighbouring pixel tiles
  // overlaps in dx, so one thread owns an image; its tiles run in order).
  const int64_t groups_of_imgs = g.nb > 1 ? g.ntiles : g.N;
#pragma omp parallel for schedule(dynamic, 1) num_threads(g.nt) if (g.nt > 1)
  for (int64_t item = 0; item < groups_of_imgs; ++item) {
    const int64_t t_begin = g.nb > 1 ? item : item * g.per_img, t_end = g.nb > 1 ? item + 1 : t_begin + g.per_img;
    for (int64_t ti = t_begin; ti < t_end; ++ti) {
      const Tile t = tile_of(g, ti);
      const int64_t L = tile_cols(g, t);
      const T* dyp;   // [K, L] with leading dimension lda
      int64_t lda;
      if (t.nbc == 1) { dyp = dy + t.n0 * g.K * g.PQ + t.pq0; lda = g.PQ; }
      else { T* p = scratch<T>(1, size_t(g.K * L)); gather_dy(g, dy, t, p); dyp = p; lda = L; }
      // dst[gi] = W_g^T * dY_g ([CRSg or Cg, L], leading dimension ldd).
      auto wt_dy = [&](T* dst, int64_t gstride, int64_t ldd) {
        for (int64_t gi = 0; gi < g.G; ++gi) {
          if constexpr (std::is_same_v<T, float>)
            if (wpk) {
              sgemm_avx512_packed(true, wpk + gi * wsize, g.CRSg, g.Kg, false, L, dyp + gi * g.Kg * lda, lda, 0.f,
                                  dst + gi * gstride, ldd);
              continue;
            }
          blas_gemm<T>(true, false, g.CRSg, L, g.Kg, w + gi * g.Kg * g.CRSg, g.CRSg, dyp + gi * g.Kg * lda, lda,
                       T(0), dst + gi * gstride, ldd);
        }
      };
      if (g.direct && t.nbc == 1) {   // dx pixels map 1:1 to output pixels (CRSg = Cg): GEMM in place
        wt_dy(dx + t.n0 * g.C * g.HW + t.pq0, g.Cg * g.HW, g.HW);
        continue;
      }
      T* dcol = scratch<T>(0, size_t(g.CRS * L));
      wt_dy(dcol, g.CRSg * L, L);
      if (t.pq0 == 0) std::fill(dx + t.n0 * g.C * g.HW, dx + (t.n0 + t.nbc) * g.C * g.HW, T(0));
      for (int64_t i = 0; i < t.nbc; ++i) col2im_add(g, dcol, L, i * g.PQ, t.n0 + i, t.pq0, t.pq1, dx);
    }
  }
}

template <class T> void conv2d_backward_weight_cpu(const Conv2dArgs& a) {
  if (a.channels_last) return conv2d_backward_weight_nhwc<T>(a);   // kernels/cpu/conv_nhwc_cpu.cpp
  if constexpr (std::is_same_v<T, float>)
    if (conv_direct_applies(a)) {
      note_path<T>("conv2d_backward_weight", true);
      return conv_direct_backward_weight(a);
    }
  if (conv_taps_applies(a)) {
    note_kernel_choice("conv2d_backward_weight", "tap GEMMs (small planes)");
    return conv_taps_backward_weight<T>(a);
  }
  const Geom g = make_geom<T>(a, /*min_tiles=*/1);
  note_path<T>("conv2d_backward_weight", false, &g);
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  T* dw = static_cast<T*>(a.dw);
  if (g.N == 0) { std::fill(dw, dw + g.K * g.CRSg, T(0)); return; }
  SerialBlas serial;
  // Col rows are cut into a number of slices fixed by the shapes (1..16, >= 64 rows each);
  // a slice is owned by one thread and accumulates the tiles in tile order, so every GEMM
  // and every dW sum is the same whatever the thread count.
  int64_t nslices = 1;
  while (nslices < 16 && g.CRS / (nslices * 2) >= 64) nslices *= 2;
#pragma omp parallel for schedule(dynamic, 1) num_threads(g.nt) if (g.nt > 1)
  for (int64_t sl = 0; sl < nslices; ++sl) {
    const int64_t row0 = g.CRS * sl / nslices, row1 = g.CRS * (sl + 1) / nslices;
    for (int64_t ti = 0; ti < g.ntiles; ++ti) {
      const Tile t = tile_of(g, ti);
      const int64_t L = tile_cols(g, t);
      const T* dyp;
      int64_t lda;
      if (t.nbc == 1) { dyp = dy + t.n0 * g.K * g.PQ + t.pq0; lda = g.PQ; }
      else { T* p = scratch<T>(1, size_t(g.K * L)); gather_dy(g, dy, t, p); dyp = p; lda = L; }
      const T* col;   // rows [row0, row1) of the col panel, leading dimension ldb
      int64_t ldb = L;
      if (g.direct && t.nbc == 1) { col = x + (t.n0 * g.C + row0) * g.HW + t.pq0; ldb = g.HW; }
      else {
        T* c = scratch<T>(0, size_t((row1 - row0) * L));
        for (int64_t i = 0; i < t.nbc; ++i) im2col(g, x, t.n0 + i, t.pq0, t.pq1, row0, row1, c, L, i * g.PQ);
        col = c;
      }
      const T beta = ti == 0 ? T(0) : T(1);
      for (int64_t gi = row0 / g.CRSg; gi < g.G && gi * g.CRSg < row1; ++gi) {
        const int64_t lo = std::max(row0, gi * g.CRSg), hi = std::min(row1, (gi + 1) * g.CRSg);
        blas_gemm<T>(false, true, g.Kg, hi - lo, L, dyp + gi * g.Kg * lda, lda, col + (lo - row0) * ldb, ldb,
                     beta, dw + gi * g.Kg * g.CRSg + (lo - gi * g.CRSg), g.CRSg);
      }
    }
  }
}

template <class T> void channel_bias_add_cpu(const ChannelBiasArgs& a) {
  T* y = static_cast<T*>(a.y);
  const T* b = static_cast<const T*>(a.b);
  const bool relu = a.relu;
#pragma omp parallel for collapse(2) schedule(static) if (a.N * a.K * a.HW > 32768)
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t k = 0; k < a.K; ++k) {
      T* p = y + (n * a.K + k) * a.HW;
      const T bk = b[k];
      if (relu) {   // relu_forward_cpu's rule on the sum: NaN propagates
#pragma omp simd
        for (int64_t i = 0; i < a.HW; ++i) {
          const T v = p[i] + bk;
          p[i] = (v > T(0) || v != v) ? v : T(0);
        }
      } else {
#pragma omp simd
        for (int64_t i = 0; i < a.HW; ++i) p[i] += bk;
      }
    }
}

template <class T> void channel_bias_grad_cpu(const ChannelBiasArgs& a) {
  if (a.channels_last) return channel_bias_grad_rows<T>(a);   // conv_nhwc_cpu.cpp
  const T* dy = static_cast<const T*>(a.dy);
  T* db = static_cast<T*>(a.db);
#pragma omp parallel for schedule(static) if (a.N * a.K * a.HW > 32768)
  for (int64_t k = 0; k < a.K; ++k) {
    double acc = 0.0;   // fixed order: images, then pixels
    for (int64_t n = 0; n < a.N; ++n) {
      const T* p = dy + (n * a.K + k) * a.HW;
      double s = 0.0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < a.HW; ++i) s += double(p[i]);
      acc += s;
    }
    db[k] = T(acc);
  }
}
// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
template <DType H> Conv2dArgs conv_widened(const Conv2dArgs& a, Widen<H>& w, KernelTable<Conv2dArgs>& t) {
  const int64_t xn = a.N * a.C * a.H * a.W, wn = a.K * (a.C / std::max<int64_t>(a.p.groups, 1)) * a.R * a.S,
                yn = a.N * a.K * a.P * a.Q;
  Conv2dArgs f = a;
  if (&t == &conv2d_forward_kernels()) {
    f.x = w.in(a.x, xn); f.w = w.in(a.w, wn); f.y = w.out(a.y, yn);
  } else if (&t == &conv2d_backward_data_kernels()) {
    f.dy = w.in(a.dy, yn); f.w = w.in(a.w, wn); f.dx = w.out(a.dx, xn);
  } else {
    f.x = w.in(a.x, xn); f.dy = w.in(a.dy, yn); f.dw = w.out(a.dw, wn);
  }
  return f;
}
template <DType H, KernelTable<Conv2dArgs>& (*Table)()> void conv_half(const Conv2dArgs& a) {
  Widen<H> w;
  run_f32(Table(), conv_widened(a, w, Table()));
  w.narrow();
}
template <DType H> void channel_bias_add_half(const ChannelBiasArgs& a) {
  Widen<H> w;
  ChannelBiasArgs f = a;
  f.y = w.inout(a.y, a.N * a.K * a.HW);
  f.b = w.in(a.b, a.K);
  run_f32(channel_bias_add_kernels(), f);
  w.narrow();
}
template <DType H> void channel_bias_grad_half(const ChannelBiasArgs& a) {
  Widen<H> w;
  ChannelBiasArgs f = a;
  f.dy = w.in(a.dy, a.N * a.K * a.HW);
  f.db = w.out(a.db, a.K);
  run_f32(channel_bias_grad_kernels(), f);
  w.narrow();
}

template <DType H> void register_conv_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&conv_half<H, conv2d_forward_kernels>>(conv2d_forward_kernels(), cpu, H);
  set_kernel<&conv_half<H, conv2d_backward_data_kernels>>(conv2d_backward_data_kernels(), cpu, H);
  set_kernel<&conv_half<H, conv2d_backward_weight_kernels>>(conv2d_backward_weight_kernels(), cpu, H);
  set_kernel<&channel_bias_add_half<H>>(channel_bias_add_kernels(), cpu, H);
  set_kernel<&channel_bias_grad_half<H>>(channel_bias_grad_kernels(), cpu, H);
}
}  // namespace

// The NHWC kernels' GEMM (conv_nhwc_cpu.h): the tiles' own GEMM choice, single-threaded.
void conv_tile_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float beta, float* C, int64_t ldc) {
  blas_gemm<float>(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}
void conv_tile_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
                    int64_t ldb, double beta, double* C, int64_t ldc) {
  blas_gemm<double>(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void register_conv_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(conv2d_forward_kernels(), conv2d_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(conv2d_backward_data_kernels(), conv2d_backward_data_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(conv2d_backward_weight_kernels(), conv2d_backward_weight_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(channel_bias_add_kernels(), channel_bias_add_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(channel_bias_grad_kernels(), channel_bias_grad_cpu);
  register_conv_half<DType::f16>();
  register_conv_half<DType::bf16>();
}

}  // namespace oomlab
