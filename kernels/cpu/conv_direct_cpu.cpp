// conv_direct_cpu.cpp — direct (no im2col, no GEMM library) float32 conv2d kernels for
// small-channel 3x3 convs: groups 1, pad 1, dilation 1, stride 1 or 2, C <= 64, K <= 64
// (the CIFAR/ResNet-20 shapes, where im2col + GEMM makes skinny GEMMs). AVX2 + FMA
// intrinsics; without them conv_direct_applies() is false. conv_cpu.cpp dispatches here
// from the shapes alone; double and every other shape keep the im2col + GEMM path.
// Layout: each image channel is copied into a zero-padded plane flattened with row width
// Wp = W + 1 (one zero column shared by neighbouring rows, plus one leading zero), so tap
// (r, s) is the constant offset r*Wp + s and output pixel (p, q) is flat position
// o = p*Wp + q (the q = Q column is computed and dropped). Stride 2 splits the padded
// input into its four row/column parity planes, so every tap is again a constant offset.
//   forward:         y[k, o] = sum over (c, tap) of w * in[c, o + off]; micro-kernel:
//                    4 output channels x 3 vectors of 8 positions (OpenMP over images)
//   backward data:   stride 1: the same kernel on padded dy with flipped, transposed
//                    weights; stride 2: the four parity phases of dx, each a stride-1
//                    correlation of dy with a 2x2/2x1/1x2/1x1 sub-kernel, scattered into
//                    dx (OpenMP over images)
//   backward weight: dw[k, c, tap] = sum_o dy[o, k] * in[c, o + off]: dy transposed to
//                    position-major, outer-product micro-kernel (k vectors x taps) over
//                    fixed chunks of images (chunk size from the shapes); the chunk
//                    partials are summed in chunk order (OpenMP over chunks, then taps).
// Determinism: each output element is computed by one thread in an order fixed by the
// shapes, so results are bitwise independent of the thread count. One level of OpenMP;
// no BLAS calls. Scratch: thread-local grow-only host buffers (not device memory).
#include "kernels/cpu/conv_direct_cpu.h"

#include "kernels/cpu/conv_direct_avx512.h"
#include "kernels/cpu/conv_threads.h"
#include "kernels/cpu/thread_scratch.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define OOMLAB_HAVE_CONV_DIRECT 1
#endif
// Full unrolling before scalar replacement keeps the accumulator arrays in registers.
#define OOMLAB_UNROLL _Pragma("GCC unroll 16")

namespace oomlab {

bool conv_direct_applies(const Conv2dArgs& a) {
#ifdef OOMLAB_HAVE_CONV_DIRECT
  const Conv2dParams& p = a.p;
  return p.groups == 1 && a.R == 3 && a.S == 3 && p.pad_h == 1 && p.pad_w == 1 && p.dil_h == 1 &&
         p.dil_w == 1 && p.stride_h == p.stride_w && (p.stride_h == 1 || p.stride_h == 2) && a.C >= 1 &&
         a.C <= 64 && a.K >= 1 && a.K <= 64 && a.H >= 1 && a.W >= 1;
#else
  (void)a;
  return false;
#endif
}

#ifdef OOMLAB_HAVE_CONV_DIRECT
namespace {

constexpr int64_t kSlack = 32;              // zeros after each plane's data (16-wide vector tails read them)
constexpr int64_t kChunkBytes = 512 << 10;  // backward-weight working set per chunk of images

inline int64_t up(int64_t v, int64_t m) { return conv_direct_up(v, m); }

enum Slot { kIn, kOut, kDyT, kPack, kPart, kNumSlots };
struct DirectFamily;
float* scratch(Slot s, size_t n) { return thread_scratch<float, DirectFamily, kNumSlots>(s, n); }

struct Geom {
  int64_t N, C, H, W, K, P, Q, st;
  int64_t Wp;  // flat row width of the input planes (stride 1: W + 1; stride 2: Q + 1)
  int64_t ps;  // floats per plane
  int64_t cs;  // floats per input channel (stride 2: four parity planes)
  int64_t Lo;  // flat output positions P * Wp
  int nt;      // OpenMP threads
};
Geom make_geom(const Conv2dArgs& a) {
  Geom g{a.N, a.C, a.H, a.W, a.K, a.P, a.Q, a.p.stride_h, 0, 0, 0, 0, 1};
  if (g.st == 1) { g.Wp = g.W + 1; g.ps = up(1 + (g.H + 2) * g.Wp + kSlack, 8); g.cs = g.ps; }
  else { g.Wp = g.Q + 1; g.ps = up((g.P + 1) * g.Wp + kSlack, 8); g.cs = 4 * g.ps; }
  g.Lo = g.P * g.Wp;
  const double flops = 18.0 * double(g.N * g.K * g.P * g.Q) * double(g.C);
  g.nt = conv_omp_threads(flops);
  return g;
}

// Lanes [0, n) of a vector (n clamped to [0, 8]).
inline __m256i lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::clamp<int64_t>(n, 0, 8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline __m256 load_n(const float* s, int64_t n) {   // s[0, 8), lanes >= n read as 0 (not touched)
  return n >= 8 ? _mm256_loadu_ps(s) : _mm256_maskload_ps(s, lanes(n));
}
// Stores v's lanes [0, n) at d: a whole vector when d + 8 <= end (lanes >= n clobber what
// follows, which the caller rewrites later), else element by element (masked stores are slow
// on AMD).
inline void store_n(float* d, __m256 v, int64_t n, const float* end) {
  if (d + 8 <= end) { _mm256_storeu_ps(d, v); return; }
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  for (int64_t i = 0; i < std::min<int64_t>(n, 8); ++i) d[i] = t[i];
}
// d[0, n) = s[0, n) (s read only there); d[n, up(n, 8)) may be clobbered below `end`.
inline void copy_n(float* d, const float* s, int64_t n, const float* end) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_loadu_ps(s + i));
  if (i < n) store_n(d + i, load_n(s + i, n - i), n - i, end);
}

// pl[1 + (h+1)*Wp + w] = img[h*W + w] with Wp = W + 1; every other entry of pl[0, ps) is 0.
void pad_plane(const float* img, int64_t H, int64_t W, int64_t ps, float* pl) {
  const int64_t Wp = W + 1;
  std::memset(pl, 0, sizeof(float) * size_t(1 + Wp));
  for (int64_t h = 0; h < H; ++h) {
    float* d = pl + 1 + (h + 1) * Wp;
    copy_n(d, img + h * W, W, pl + ps);   // clobbers only later rows / the bottom pad
    d[W] = 0.f;
  }
  std::memset(pl + 1 + (H + 1) * Wp, 0, sizeof(float) * size_t(ps - 1 - (H + 1) * Wp));
}

// Parity planes of the 1-padded image: pl[(2a+b)*ps + i*Wq + j] = img[2i+a-1, 2j+b-1] (0 outside).
// Rows are written in order with whole vectors; a row's overhang (< 9 floats) lands in the
// next row, rewritten after it, or in the plane's slack, zeroed last.
void pad_parity(const float* img, int64_t H, int64_t W, int64_t Hq, int64_t Wq, int64_t ps, float* pl) {
  for (int64_t a = 0; a < 2; ++a) {
    float* d0 = pl + 2 * a * ps;   // b = 0: odd input columns, shifted right by one
    float* d1 = d0 + ps;           // b = 1: even input columns
    for (int64_t i = 0; i < Hq; ++i) {
      const int64_t h = 2 * i + a - 1;
      float* r0 = d0 + i * Wq;
      float* r1 = d1 + i * Wq;
      r0[0] = 0.f;
      for (int64_t j = 0; j < Wq; j += 8) {
        __m256 ev = _mm256_setzero_ps(), od = ev;
        if (h >= 0 && h < H) {   // de-interleave img[h, 2j .. 2j + 16)
          const float* src = img + h * W + 2 * j;
          const __m256 lo = load_n(src, W - 2 * j), hi = load_n(src + 8, W - 2 * j - 8);
          ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
          od = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
        }
        _mm256_storeu_ps(r1 + j, ev);
        _mm256_storeu_ps(r0 + j + 1, od);
      }
    }
    std::fill(d0 + Hq * Wq, d0 + ps, 0.f);
    std::fill(d1 + Hq * Wq, d1 + ps, 0.f);
  }
}

// Input planes of image n (all C channels) for forward / backward weight.
void build_input(const Geom& g, const float* x, int64_t n, float* in) {
  for (int64_t c = 0; c < g.C; ++c) {
    const float* img = x + (n * g.C + c) * g.H * g.W;
    if (g.st == 1) pad_plane(img, g.H, g.W, g.ps, in + c * g.cs);
    else pad_parity(img, g.H, g.W, g.P + 1, g.Wp, g.ps, in + c * g.cs);
  }
}

// toff[c*9 + r*3 + s]: offset of tap (r, s) of channel c in the planes of build_input.
std::vector<int32_t> input_taps(const Geom& g) {
  std::vector<int32_t> toff;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t s = 0; s < 3; ++s)
        toff.push_back(int32_t(c * g.cs + (g.st == 1 ? r * g.Wp + s
                                                     : ((r % 2) * 2 + s % 2) * g.ps + (r / 2) * g.Wp + s / 2)));
  return toff;
}

// wp[kb][i][lane] = f(kb*8 + lane, i) for kb*8 + lane < Kout, else 0 (i < ni).
template <class F> void pack(int64_t Kout, int64_t ni, float* wp, F f) {
  for (int64_t kb = 0; kb < up(Kout, 8) / 8; ++kb)
    for (int64_t i = 0; i < ni; ++i)
      for (int64_t l = 0; l < 8; ++l) wp[(kb * ni + i) * 8 + l] = kb * 8 + l < Kout ? f(kb * 8 + l, i) : 0.f;
}

// out[k*ldo + j] = sum_i w[i*8 + k] * in[toff[i] + j] for KB channels and VB*8 positions j.
template <int KB, int VB>
inline void tap_kernel(const float* __restrict in, const int32_t* __restrict toff, int64_t ni,
                       const float* __restrict w, float* __restrict out, int64_t ldo) {
  __m256 acc[KB][VB];
  OOMLAB_UNROLL for (int k = 0; k < KB; ++k)
    OOMLAB_UNROLL for (int v = 0; v < VB; ++v) acc[k][v] = _mm256_setzero_ps();
  for (int64_t i = 0; i < ni; ++i, w += 8) {
    const float* p = in + toff[i];
    __m256 xv[VB];
    OOMLAB_UNROLL for (int v = 0; v < VB; ++v) xv[v] = _mm256_loadu_ps(p + 8 * v);
    OOMLAB_UNROLL for (int k = 0; k < KB; ++k) {
      const __m256 wk = _mm256_broadcast_ss(w + k);
      OOMLAB_UNROLL for (int v = 0; v < VB; ++v) acc[k][v] = _mm256_fmadd_ps(wk, xv[v], acc[k][v]);
    }
  }
  OOMLAB_UNROLL for (int k = 0; k < KB; ++k)
    OOMLAB_UNROLL for (int v = 0; v < VB; ++v) _mm256_storeu_ps(out + k * ldo + 8 * v, acc[k][v]);
}

// Blocks of run_taps for `len` positions (3 vectors each; 16 positions per vector on AVX-512).
inline int64_t tap_blocks(int64_t len) {
  const int64_t w = conv_direct_avx512_enabled() ? 16 : 8;
  return ((len + w - 1) / w + 2) / 3;
}

// out[k*ldo + j] = sum_i wp[k/8][i][k%8] * in[toff[i] + j], k < Kout (rows up to Kout
// rounded to 8 may be written), j < len rounded up to 8.
void run_taps(const float* in, const int32_t* toff, int64_t ni, const float* wp, int64_t Kout, int64_t len,
              float* out, int64_t ldo, Prefetch& pf) {
  if (conv_direct_avx512_enabled()) return run_taps_avx512(in, toff, ni, wp, Kout, len, out, ldo, pf);
  const int64_t nvec = (len + 7) / 8, K4 = up(Kout, 4), K8 = up(Kout, 8);
  for (int64_t v0 = 0; v0 < nvec; v0 += 3) {
    pf.next();
    const int64_t vb = std::min<int64_t>(3, nvec - v0);
    const float* ip = in + v0 * 8;
    float* op = out + v0 * 8;
    if (vb == 1) {
      for (int64_t k = 0; k < K8; k += 8) tap_kernel<8, 1>(ip, toff, ni, wp + k * ni, op + k * ldo, ldo);
      continue;
    }
    for (int64_t k = 0; k < K4; k += 4) {
      const float* w = wp + (k / 8) * ni * 8 + k % 8;
      if (vb == 3) tap_kernel<4, 3>(ip, toff, ni, w, op + k * ldo, ldo);
      else tap_kernel<4, 2>(ip, toff, ni, w, op + k * ldo, ldo);
    }
  }
}

// Backward weight: part[(t0 + j)*K8 + 8*kv + lane] = sum over images i < cnt and o < Lo of
// dyt[i*ds + o*K8 + 8*kv + lane] * in[i*is + toff[t0 + j] + o] (dyt already offset to a k block).
template <int KV, int TG>
inline void corr_kernel(const float* __restrict in, int64_t is, const float* __restrict dyt, int64_t ds,
                        int64_t K8, int64_t cnt, int64_t Lo, const int32_t* toff, float* __restrict part) {
  __m256 acc[KV][TG];
  OOMLAB_UNROLL for (int v = 0; v < KV; ++v)
    OOMLAB_UNROLL for (int j = 0; j < TG; ++j) acc[v][j] = _mm256_setzero_ps();
  for (int64_t i = 0; i < cnt; ++i) {
    const float* b[TG];
    OOMLAB_UNROLL for (int j = 0; j < TG; ++j) b[j] = in + i * is + toff[j];
    const float* d = dyt + i * ds;
    for (int64_t o = 0; o < Lo; ++o, d += K8) {
      __m256 dv[KV];
      OOMLAB_UNROLL for (int v = 0; v < KV; ++v) dv[v] = _mm256_loadu_ps(d + 8 * v);
      OOMLAB_UNROLL for (int j = 0; j < TG; ++j) {
        const __m256 bj = _mm256_broadcast_ss(b[j] + o);
        OOMLAB_UNROLL for (int v = 0; v < KV; ++v) acc[v][j] = _mm256_fmadd_ps(dv[v], bj, acc[v][j]);
      }
    }
  }
  OOMLAB_UNROLL for (int j = 0; j < TG; ++j)
    OOMLAB_UNROLL for (int v = 0; v < KV; ++v) _mm256_storeu_ps(part + j * K8 + 8 * v, acc[v][j]);
}

// All taps of one chunk: 16 output channels at a time (2 vectors x 6 taps), then 8.
template <int KV>
void corr_kv(const float* in, int64_t is, const float* dyt, int64_t ds, int64_t K8, int64_t cnt, int64_t Lo,
             const int32_t* toff, int64_t ntap, float* part, int64_t kb, Prefetch& px, Prefetch& pd) {
  constexpr int TG = 12 / KV;
  int64_t t = 0;
  for (; t + TG <= ntap; t += TG, px.next(), pd.next())
    corr_kernel<KV, TG>(in, is, dyt + kb, ds, K8, cnt, Lo, toff + t, part + t * K8 + kb);
  for (; t < ntap; t += 3)   // ntap = 9*C is a multiple of 3
    corr_kernel<KV, 3>(in, is, dyt + kb, ds, K8, cnt, Lo, toff + t, part + t * K8 + kb);
}

// d[(p*Wp + q)*K8 + k] = src[(k*P + p)*Q + q] for k < K, p < P, q < Q (dy of one image,
// position-major); d is 0 at every other position and lane of [0, P*Wp*K8). Wp = Q + 1.
// A row's last 8x8 block may write zeros up to 7 positions past it (the next row, written
// after it, or the caller's slack).
void transpose_dy(const float* src, int64_t K, int64_t P, int64_t Q, int64_t Wp, int64_t K8, float* d) {
  if (K % 8) std::memset(d, 0, sizeof(float) * size_t(P * Wp * K8));
  for (int64_t p = 0; p < P; ++p) {
    float* drow = d + p * Wp * K8;
    int64_t k0 = 0;
    for (; k0 + 8 <= K; k0 += 8) {
      const float* s0 = src + (k0 * P + p) * Q;
      for (int64_t q = 0; q < Wp; q += 8) {   // 8x8 block transpose; columns >= Q read as 0
        __m256 r[8], t[8];
        for (int i = 0; i < 8; ++i) r[i] = load_n(s0 + i * P * Q + q, Q - q);
        for (int i = 0; i < 8; i += 2) {
          t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
          t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
        }
        for (int i = 0; i < 8; i += 4) {
          r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
          r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
          r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
          r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
        }
        for (int i = 0; i < 4; ++i) {
          _mm256_storeu_ps(drow + (q + i) * K8 + k0, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
          _mm256_storeu_ps(drow + (q + i + 4) * K8 + k0, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
        }
      }
    }
    for (int64_t k = k0; k < K; ++k)
      for (int64_t q = 0; q < Q; ++q) drow[q * K8 + k] = src[(k * P + p) * Q + q];
  }
}

}  // namespace

void conv_direct_forward(const Conv2dArgs& a) {
  const Geom g = make_geom(a);
  const float* x = static_cast<const float*>(a.x);
  const float* w = static_cast<const float*>(a.w);
  float* y = static_cast<float*>(a.y);
  const int64_t ni = g.C * 9, K8 = up(g.K, 8), ldo = up(g.Lo, 16);   // 16: room for AVX-512 row tails
  const std::vector<int32_t> toff = input_taps(g);
  float* wp = scratch(kPack, size_t(K8 * ni));
  pack(g.K, ni, wp, [&](int64_t k, int64_t i) { return w[k * ni + i]; });
#pragma omp parallel for schedule(static) num_threads(g.nt) if (g.nt > 1)
  for (int64_t n = 0; n < g.N; ++n) {
    float* in = scratch(kIn, size_t(g.C * g.cs));
    float* out = scratch(kOut, size_t(K8 * ldo));
    build_input(g, x, n, in);
    Prefetch pf(x + (n + 1) * g.C * g.H * g.W, n + 1 < g.N ? g.C * g.H * g.W : 0, tap_blocks(g.Lo));
    run_taps(in, toff.data(), ni, wp, g.K, g.Lo, out, ldo, pf);
    const float* y_end = y + (n + 1) * g.K * g.P * g.Q;   // rows are written in order up to here
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t p = 0; p < g.P; ++p)
        copy_n(y + ((n * g.K + k) * g.P + p) * g.Q, out + k * ldo + p * g.Wp, g.Q, y_end);
  }
}

void conv_direct_backward_data(const Conv2dArgs& a) {
  const Geom g = make_geom(a);
  const float* w = static_cast<const float*>(a.w);
  const float* dy = static_cast<const float*>(a.dy);
  float* dx = static_cast<float*>(a.dx);
  // dy planes: pad_plane layout of P x Q images (row width Wd = Q + 1). Output phases:
  // stride 1 has one (dx itself, o = h*Wd + w); stride 2 has four, phase (a, b) holding
  // dx[2m + a - 1, 2l + b - 1] at o = m*Wd + l for rows m in [m0, m1].
  const int64_t Wd = g.Q + 1, dps = up(1 + (g.P + 2) * Wd + kSlack, 8), C8 = up(g.C, 8);
  struct Phase { int64_t m0 = 0, m1 = -1, ni = 0, toff_at = 0, wp_at = 0; };
  Phase ph[4];   // index 2a + b (stride 1: index 0 only)
  std::vector<int32_t> toff;
  int64_t wp_size = 0, ldo = 0;
  float* wp = scratch(kPack, size_t(C8 * g.K * 9));   // the phases hold 9 taps per (c, k) in all
  for (int64_t a = 0; a < g.st; ++a)
    for (int64_t b = 0; b < g.st; ++b) {
      const int64_t nj = g.st == 1 ? 3 : 2 - a, nk = g.st == 1 ? 3 : 2 - b;
      Phase& f = ph[2 * a + b];
      f = {g.st == 1 ? 0 : 1 - a, g.st == 1 ? g.H - 1 : (g.H - a) / 2, g.K * nj * nk, int64_t(toff.size()), wp_size};
      if (f.m1 < f.m0) continue;
      for (int64_t k = 0; k < g.K; ++k)
        for (int64_t j = 0; j < nj; ++j)
          for (int64_t i = 0; i < nk; ++i)   // stride 1: tap (j, i); stride 2: dy[m - j, l - i]
            toff.push_back(int32_t(k * dps + (g.st == 1 ? j * Wd + i : 1 + (1 - j) * Wd - i)));
      wp_size += C8 * f.ni;
      ldo = std::max(ldo, up((f.m1 - f.m0 + 1) * Wd, 16));
      const int64_t T = nj * nk;
      pack(g.C, f.ni, wp + f.wp_at, [&](int64_t c, int64_t idx) {
        const int64_t k = idx / T, jj = (idx % T) / nk, ii = idx % nk;
        const int64_t r = g.st == 1 ? 2 - jj : a + 2 * jj, s = g.st == 1 ? 2 - ii : b + 2 * ii;
        return w[((k * g.C + c) * 3 + r) * 3 + s];
      });
    }
  const int64_t panel = C8 * ldo;
#pragma omp parallel for schedule(static) num_threads(g.nt) if (g.nt > 1)
  for (int64_t n = 0; n < g.N; ++n) {
    float* in = scratch(kIn, size_t(g.K * dps));
    float* out = scratch(kOut, size_t(g.st * g.st * panel + 16));   // + interleave over-read
    for (int64_t k = 0; k < g.K; ++k) pad_plane(dy + (n * g.K + k) * g.P * g.Q, g.P, g.Q, dps, in + k * dps);
    Prefetch pf(dy + (n + 1) * g.K * g.P * g.Q, n + 1 < g.N ? g.K * g.P * g.Q : 0, tap_blocks(g.P * Wd));
    for (int64_t i = 0; i < g.st * g.st; ++i)
      if (ph[i].m1 >= ph[i].m0)
        run_taps(in + ph[i].m0 * Wd, toff.data() + ph[i].toff_at, ph[i].ni, wp + ph[i].wp_at, g.C,
                 (ph[i].m1 - ph[i].m0 + 1) * Wd, out + i * panel, ldo, pf);
    const float* dx_end = dx + (n + 1) * g.C * g.H * g.W;   // rows are written in order up to here
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t h = 0; h < g.H; ++h) {
        float* d = dx + ((n * g.C + c) * g.H + h) * g.W;
        if (g.st == 1) { copy_n(d, out + c * ldo + h * Wd, g.W, dx_end); continue; }
        // dx row h = 2m + a - 1: even columns 2j from phase (a, 1) at l = j, odd 2j + 1 from (a, 0) at l = j + 1
        const int64_t a = (h + 1) % 2, m = (h + 1 - a) / 2, row = c * ldo + (m - ph[2 * a].m0) * Wd;
        const float* ev = out + (2 * a + 1) * panel + row;
        const float* od = out + 2 * a * panel + row + 1;
        for (int64_t j = 0; 2 * j < g.W; j += 8) {   // interleave 8 + 8 -> 16 columns
          const __m256 e = _mm256_loadu_ps(ev + j), o = _mm256_loadu_ps(od + j);
          const __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
          store_n(d + 2 * j, _mm256_permute2f128_ps(lo, hi, 0x20), g.W - 2 * j, dx_end);
          if (2 * j + 8 < g.W) store_n(d + 2 * j + 8, _mm256_permute2f128_ps(lo, hi, 0x31), g.W - 2 * j - 8, dx_end);
        }
      }
  }
}

void conv_direct_backward_weight(const Conv2dArgs& a) {
  const Geom g = make_geom(a);
  const float* x = static_cast<const float*>(a.x);
  const float* dy = static_cast<const float*>(a.dy);
  float* dw = static_cast<float*>(a.dw);
  const int64_t ntap = g.C * 9, K8 = up(g.K, 8);
  if (g.N == 0) { std::fill(dw, dw + g.K * ntap, 0.f); return; }
  const std::vector<int32_t> toff = input_taps(g);
  // Fixed chunks of images (size from the shapes): inputs + transposed dy fit ~kChunkBytes.
  const int64_t is = g.C * g.cs, ds = g.Lo * K8;
  const int64_t nc = std::clamp<int64_t>(kChunkBytes / int64_t(sizeof(float) * (is + ds)), 1, 16);
  const int64_t nch = (g.N + nc - 1) / nc;
  float* part = scratch(kPart, size_t(nch * ntap * K8));
#pragma omp parallel for schedule(static) num_threads(g.nt) if (g.nt > 1)
  for (int64_t ch = 0; ch < nch; ++ch) {
    const int64_t n0 = ch * nc, cnt = std::min(nc, g.N - n0);
    float* in = scratch(kIn, size_t(nc * is));
    float* dyt = scratch(kDyT, size_t(nc * ds + 8 * K8));   // + transpose_dy overhang
    for (int64_t i = 0; i < cnt; ++i) {
      build_input(g, x, n0 + i, in + i * is);
      transpose_dy(dy + (n0 + i) * g.K * g.P * g.Q, g.K, g.P, g.Q, g.Wp, K8, dyt + i * ds);
    }
    float* pp = part + ch * ntap * K8;
    const int64_t calls = (K8 + 8) / 16 * ntap / 6;
    const int64_t ncnt = std::clamp<int64_t>(g.N - n0 - nc, 0, nc);   // next chunk's images
    Prefetch px(x + (n0 + nc) * g.C * g.H * g.W, ncnt * g.C * g.H * g.W, calls);
    Prefetch pd(dy + (n0 + nc) * g.K * g.P * g.Q, ncnt * g.K * g.P * g.Q, calls);
    int64_t kb = 0;
    if (conv_direct_avx512_enabled())   // 32 or 16 channels per pass on AVX-512 (same sums, same order)
      for (; kb + 16 <= K8; kb += kb + 32 <= K8 ? 32 : 16)
        corr_avx512(in, is, dyt, ds, K8, cnt, g.Lo, toff.data(), ntap, pp, kb, kb + 32 <= K8, px, pd);
    for (; kb + 16 <= K8; kb += 16) corr_kv<2>(in, is, dyt, ds, K8, cnt, g.Lo, toff.data(), ntap, pp, kb, px, pd);
    if (kb < K8) corr_kv<1>(in, is, dyt, ds, K8, cnt, g.Lo, toff.data(), ntap, pp, kb, px, pd);
  }
  // dw[k, tap] = sum of the chunk partials in chunk order.
#pragma omp parallel for schedule(static) num_threads(g.nt) if (g.nt > 1)
  for (int64_t t = 0; t < ntap; ++t) {
    float acc[64];
    std::copy(part + t * K8, part + t * K8 + g.K, acc);
    for (int64_t ch = 1; ch < nch; ++ch) {
      const float* src = part + (ch * ntap + t) * K8;
      for (int64_t k = 0; k < g.K; ++k) acc[k] += src[k];
    }
    for (int64_t k = 0; k < g.K; ++k) dw[k * ntap + t] = acc[k];
  }
}

#else   // no AVX2/FMA: conv_direct_applies() is false, these are never called
void conv_direct_forward(const Conv2dArgs&) {}
void conv_direct_backward_data(const Conv2dArgs&) {}
void conv_direct_backward_weight(const Conv2dArgs&) {}
#endif

}  // namespace oomlab
