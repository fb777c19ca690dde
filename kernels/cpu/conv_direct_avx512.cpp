// conv_direct_avx512.cpp — the AVX-512 loops of the direct conv kernels (see
// conv_direct_avx512.h). Compiled for the build's baseline ISA; the functions that use
// AVX-512 carry target("avx512f") and run only when the CPU reports AVX-512F.
// Bitwise contract: every output lane accumulates w * in (forward, backward data) or
// dy * in (backward weight) over the same index sequence, with one fused multiply-add per
// term, as the AVX2 kernels of conv_direct_cpu.cpp do; the lane count, the number of
// channels per pass and the tap grouping change nothing in any element's arithmetic.
#include "kernels/cpu/conv_direct_avx512.h"

#include <immintrin.h>

#include <atomic>

#define OOMLAB_UNROLL _Pragma("GCC unroll 16")

namespace oomlab {
namespace {

std::atomic<int> g_avx512{-1};   // -1: not decided yet

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OOMLAB_AVX512 __attribute__((target("avx512f")))

// out[k*ldo + j] = sum_i w[i*8 + k] * in[toff[i] + j] for KB channels and VB*16 positions j.
template <int KB, int VB>
OOMLAB_AVX512 inline void tap_kernel16(const float* __restrict in, const int32_t* __restrict toff, int64_t ni,
                                       const float* __restrict w, float* __restrict out, int64_t ldo) {
  __m512 acc[KB][VB];
  OOMLAB_UNROLL for (int k = 0; k < KB; ++k)
    OOMLAB_UNROLL for (int v = 0; v < VB; ++v) acc[k][v] = _mm512_setzero_ps();
  for (int64_t i = 0; i < ni; ++i, w += 8) {
    const float* p = in + toff[i];
    __m512 xv[VB];
    OOMLAB_UNROLL for (int v = 0; v < VB; ++v) xv[v] = _mm512_loadu_ps(p + 16 * v);
    OOMLAB_UNROLL for (int k = 0; k < KB; ++k) {
      const __m512 wk = _mm512_set1_ps(w[k]);
      OOMLAB_UNROLL for (int v = 0; v < VB; ++v) acc[k][v] = _mm512_fmadd_ps(wk, xv[v], acc[k][v]);
    }
  }
  OOMLAB_UNROLL for (int k = 0; k < KB; ++k)
    OOMLAB_UNROLL for (int v = 0; v < VB; ++v) _mm512_storeu_ps(out + k * ldo + 16 * v, acc[k][v]);
}

// part[j*K8 + 16*v + lane] = sum over images i < cnt and positions o < Lo of
// dyt[i*ds + o*K8 + 16*v + lane] * in[i*is + toff[j] + o] (dyt offset to the channel block).
template <int KV, int TG>
OOMLAB_AVX512 inline void corr_kernel16(const float* __restrict in, int64_t is, const float* __restrict dyt,
                                        int64_t ds, int64_t K8, int64_t cnt, int64_t Lo, const int32_t* toff,
                                        float* __restrict part) {
  __m512 acc[KV][TG];
  OOMLAB_UNROLL for (int v = 0; v < KV; ++v)
    OOMLAB_UNROLL for (int j = 0; j < TG; ++j) acc[v][j] = _mm512_setzero_ps();
  for (int64_t i = 0; i < cnt; ++i) {
    const float* b[TG];
    OOMLAB_UNROLL for (int j = 0; j < TG; ++j) b[j] = in + i * is + toff[j];
    const float* d = dyt + i * ds;
    for (int64_t o = 0; o < Lo; ++o, d += K8) {
      __m512 dv[KV];
      OOMLAB_UNROLL for (int v = 0; v < KV; ++v) dv[v] = _mm512_loadu_ps(d + 16 * v);
      OOMLAB_UNROLL for (int j = 0; j < TG; ++j) {
        const __m512 bj = _mm512_set1_ps(b[j][o]);
        OOMLAB_UNROLL for (int v = 0; v < KV; ++v) acc[v][j] = _mm512_fmadd_ps(dv[v], bj, acc[v][j]);
      }
    }
  }
  OOMLAB_UNROLL for (int j = 0; j < TG; ++j)
    OOMLAB_UNROLL for (int v = 0; v < KV; ++v) _mm512_storeu_ps(part + j * K8 + 16 * v, acc[v][j]);
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
#else
bool cpu_has_avx512() { return false; }
#endif

}  // namespace

bool conv_direct_avx512_enabled() {
  int v = g_avx512.load(std::memory_order_relaxed);
  if (v < 0) {
    v = cpu_has_avx512() ? 1 : 0;
    g_avx512.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

void set_conv_direct_avx512(bool on) { g_avx512.store(on && cpu_has_avx512() ? 1 : 0); }

#ifdef OOMLAB_AVX512
OOMLAB_AVX512 void run_taps_avx512(const float* in, const int32_t* toff, int64_t ni, const float* wp, int64_t Kout,
                                   int64_t len, float* out, int64_t ldo, Prefetch& pf) {
  const int64_t nvec = (len + 15) / 16, K8 = conv_direct_up(Kout, 8);
  for (int64_t v0 = 0; v0 < nvec; v0 += 3) {
    pf.next();
    const int64_t vb = std::min<int64_t>(3, nvec - v0);
    const float* ip = in + v0 * 16;
    float* op = out + v0 * 16;
    for (int64_t k = 0; k < K8; k += 8) {   // 8 channels (one packed weight block) x vb vectors
      const float* w = wp + k * ni;
      if (vb == 3) tap_kernel16<8, 3>(ip, toff, ni, w, op + k * ldo, ldo);
      else if (vb == 2) tap_kernel16<8, 2>(ip, toff, ni, w, op + k * ldo, ldo);
      else tap_kernel16<8, 1>(ip, toff, ni, w, op + k * ldo, ldo);
    }
  }
}

OOMLAB_AVX512 void corr_avx512(const float* in, int64_t is, const float* dyt, int64_t ds, int64_t K8, int64_t cnt,
                               int64_t Lo, const int32_t* toff, int64_t ntap, float* part, int64_t kb, bool kv32,
                               Prefetch& px, Prefetch& pd) {
  // ntap = 9 * C: groups of 6 taps (32 channels) or 12 taps (16 channels), then of 3.
  const int64_t tg = kv32 ? 6 : 12;
  int64_t t = 0;
  for (; t + tg <= ntap; t += tg, px.next(), pd.next()) {
    if (kv32) corr_kernel16<2, 6>(in, is, dyt + kb, ds, K8, cnt, Lo, toff + t, part + t * K8 + kb);
    else corr_kernel16<1, 12>(in, is, dyt + kb, ds, K8, cnt, Lo, toff + t, part + t * K8 + kb);
  }
  for (; t < ntap; t += 3) {
    if (kv32) corr_kernel16<2, 3>(in, is, dyt + kb, ds, K8, cnt, Lo, toff + t, part + t * K8 + kb);
    else corr_kernel16<1, 3>(in, is, dyt + kb, ds, K8, cnt, Lo, toff + t, part + t * K8 + kb);
  }
}
#else
void run_taps_avx512(const float*, const int32_t*, int64_t, const float*, int64_t, int64_t, float*, int64_t,
                     Prefetch&) {}
void corr_avx512(const float*, int64_t, const float*, int64_t, int64_t, int64_t, int64_t, const int32_t*, int64_t,
                 float*, int64_t, bool, Prefetch&, Prefetch&) {}
#endif

}  // namespace oomlab
