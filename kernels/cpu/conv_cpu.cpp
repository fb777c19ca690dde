// conv_cpu.cpp — CPU kernels of conv2d (kernels/conv.h; float, double; float16/bfloat16 on
// widened float32 copies) by tiled im2col + GEMM. The tiles and im2col/col2im are
// im2col_cpu.h's (column tiles fixed by the shapes alone, cache-sized col panels); group g
// owns col rows [g*CRSg, (g+1)*CRSg). 1x1 / stride 1 / pad 0 convs read x directly (no
// im2col). The channel bias is channel_bias_cpu.cpp's.
//   forward:         y_g = W_g * col_g              (OpenMP over tiles)
//   backward data:   dcol_g = W_g^T * dY_g; col2im  (OpenMP over images: no write races)
//   backward weight: dW[:, rows] (+)= dY * col[rows]^T (OpenMP over col-row slices, each
//                    slice sums the tiles in tile order: bitwise independent of threads)
// Float 3x3 convs with small channel counts (conv_direct_applies: the ResNet-20 shapes)
// take the direct kernels of conv_direct_cpu.cpp instead; the choice depends on the
// shapes only; small output planes (conv_taps_applies) take conv_taps_cpu.cpp's per-tap
// GEMMs (no products with padding). Conv2dArgs::cpu_path may force im2col or the tap GEMMs
// (route_of). channels_last buffers go to conv_nhwc_cpu.cpp.
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

#include "engine/core/thread_budget.h"
#include "engine/memory/kernel_choices.h"
#include "kernels/conv.h"
#include "kernels/cpu/half_widen.h"
#include "kernels/cpu/conv_direct_cpu.h"
#include "kernels/cpu/conv_nhwc_cpu.h"
#include "kernels/cpu/conv_taps_cpu.h"
#include "kernels/cpu/im2col_cpu.h"
#include "kernels/cpu/sgemm_avx512.h"
#include "kernels/cpu/thread_scratch.h"

extern "C" char* openblas_get_corename(void);

namespace oomlab {
namespace {
using namespace conv_tiles;   // Geom, Tile, make_geom, im2col, col2im_add (im2col_cpu.h)

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

// The path a call takes, for kernel_choices.h: the direct 3x3 kernels, or im2col (none for
// 1x1 stride-1 unpadded convolutions) and a GEMM.
template <class T> void note_path(const char* op, bool direct_kernel, const Geom* g = nullptr) {
  if (direct_kernel) return note_kernel_choice(op, "direct 3x3 kernels");
  const char* gemm =
      !std::is_same_v<T, float> ? "OpenBLAS dgemm" : (use_own_sgemm() ? "own AVX-512 sgemm" : "OpenBLAS sgemm");
  note_kernel_choice(op, std::string(g && g->direct ? "1x1 GEMM on x, " : "im2col + ") + gemm);
}

// The path of an NCHW call: Conv2dArgs::cpu_path, where it names one the shapes allow, else
// the measured rule (direct 3x3 kernels, then tap GEMMs, then im2col + GEMM).
enum class Route { direct, taps, im2col };
template <class T> Route route_of(const Conv2dArgs& a) {
  if (a.cpu_path == CpuConvPath::im2col) return Route::im2col;
  if (a.cpu_path == CpuConvPath::taps && conv_taps_supported(a)) return Route::taps;
  if constexpr (std::is_same_v<T, float>)
    if (conv_direct_applies(a)) return Route::direct;
  return conv_taps_applies(a, std::is_same_v<T, float> && use_own_sgemm()) ? Route::taps : Route::im2col;
}

// Runs the direct (float) or tap kernels of `op` when the call's route is theirs (true).
template <class T, void (*Direct)(const Conv2dArgs&), void (*Taps)(const Conv2dArgs&)>
bool ran_direct_or_taps(const char* op, const Conv2dArgs& a) {
  switch (route_of<T>(a)) {
    case Route::direct: note_path<T>(op, true); Direct(a); return true;
    case Route::taps: note_kernel_choice(op, "tap GEMMs (small planes)"); Taps(a); return true;
    case Route::im2col: return false;
  }
  return false;
}

template <class T> void conv2d_forward_cpu(const Conv2dArgs& a) {
  if (a.channels_last) return conv2d_forward_nhwc<T>(a);   // kernels/cpu/conv_nhwc_cpu.cpp
  if (ran_direct_or_taps<T, conv_direct_forward, conv_taps_forward<T>>("conv2d_forward", a)) return;
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
  if (ran_direct_or_taps<T, conv_direct_backward_data, conv_taps_backward_data<T>>("conv2d_backward_data", a)) return;
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
  if (ran_direct_or_taps<T, conv_direct_backward_weight, conv_taps_backward_weight<T>>("conv2d_backward_weight", a))
    return;
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
template <DType H> void register_conv_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&conv_half<H, conv2d_forward_kernels>>(conv2d_forward_kernels(), cpu, H);
  set_kernel<&conv_half<H, conv2d_backward_data_kernels>>(conv2d_backward_data_kernels(), cpu, H);
  set_kernel<&conv_half<H, conv2d_backward_weight_kernels>>(conv2d_backward_weight_kernels(), cpu, H);
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
  register_conv_half<DType::f16>();
  register_conv_half<DType::bf16>();
}

}  // namespace oomlab
