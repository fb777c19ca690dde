// sgemm_avx512.cpp — packed AVX-512 float32 GEMM (see sgemm_avx512.h). Loop order (as
// BLIS/Goto): columns of C in blocks of kNc; K in blocks of kKc (B panel packed into
// 32-column strips, k-major); rows in blocks of kMc (A panel packed into 12-row strips,
// k-major); then every (A strip, B strip) pair runs the 12x32 micro-kernel, which keeps 24
// zmm accumulators, reads 2 vectors of B and broadcasts 12 values of A per k, and adds its
// block into C (masked loads/stores at the edges). Packed panels are zero-padded, so edge
// strips run the same kernel.
#include "kernels/cpu/sgemm_avx512.h"
#include "kernels/cpu/thread_scratch.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace oomlab {
namespace {

constexpr int64_t kMr = 12, kNr = 32, kKc = 256, kMc = 120, kNc = 2048;

struct SgemmFamily;
float* scratch(int slot, size_t n) { return thread_scratch<float, SgemmFamily, 2>(slot, n); }

// Strip s of a K block (kKc floats per row, whatever kc): trans (A stored [K, M]): k-major,
// Ap[s][k][r] = op(A)[i0 + s*12 + r][p0 + k]; otherwise row-major, Ap[s][r][k] (a row copy,
// kKc apart: the micro-kernel's loads of a k are then at fixed offsets). Zero past mc rows.
void pack_a(bool trans, const float* A, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* ap) {
  for (int64_t s = 0; s * kMr < mc; ++s) {
    float* d = ap + s * kMr * kKc;
    const int64_t rows = std::min(kMr, mc - s * kMr), r0 = i0 + s * kMr;
    if (trans) {   // A stored [K, M]: row k of the strip is contiguous
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = A + (p0 + k) * lda + r0;
        for (int64_t r = 0; r < rows; ++r) d[k * kMr + r] = src[r];
        for (int64_t r = rows; r < kMr; ++r) d[k * kMr + r] = 0.f;
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) std::memcpy(d + r * kKc, A + (r0 + r) * lda + p0, size_t(kc) * sizeof(float));
      for (int64_t r = rows; r < kMr; ++r) std::fill(d + r * kKc, d + r * kKc + kc, 0.f);
    }
  }
}

// Bp[s][k][j] = op(B)[p0 + k][j0 + s*32 + j], zero past nc columns.
void pack_b(bool trans, const float* B, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* bp) {
  for (int64_t s = 0; s * kNr < nc; ++s) {
    float* d = bp + s * kNr * kc;
    const int64_t cols = std::min(kNr, nc - s * kNr), c0 = j0 + s * kNr;
    if (trans) {   // B stored [N, K]: column j of op(B) is row j of B
      for (int64_t j = 0; j < cols; ++j) {
        const float* src = B + (c0 + j) * ldb + p0;
        for (int64_t k = 0; k < kc; ++k) d[k * kNr + j] = src[k];
      }
      if (cols < kNr)
        for (int64_t k = 0; k < kc; ++k) std::fill(d + k * kNr + cols, d + (k + 1) * kNr, 0.f);
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const float* src = B + (p0 + k) * ldb + c0;
        std::memcpy(d + k * kNr, src, size_t(cols) * sizeof(float));
        std::fill(d + k * kNr + cols, d + (k + 1) * kNr, 0.f);
      }
    }
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define OOMLAB_AVX512 __attribute__((target("avx512f")))

// C[0..rows, 0..cols) (ldc) = (accumulate ? C : 0) + sum_k ap[k][r] * bp[k][j]; NV vectors of
// 16 columns (NV = 1 serves strips of at most 16 columns without computing the other half).
// AROWS: the strip is row-major (pack_a without trans); else k-major.
template <int NV, bool AROWS>
OOMLAB_AVX512 void micro_kernel_nv(int64_t kc, const float* __restrict ap, const float* __restrict bp, float* c,
                                   int64_t ldc, int64_t rows, int64_t cols, bool accumulate) {
  __m512 acc[kMr][2];
#pragma GCC unroll 12
  for (int r = 0; r < kMr; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k, ap += AROWS ? 1 : kMr, bp += kNr) {
    const __m512 b0 = _mm512_loadu_ps(bp), b1 = NV == 2 ? _mm512_loadu_ps(bp + 16) : b0;
#pragma GCC unroll 12
    for (int r = 0; r < kMr; ++r) {
      const __m512 a = _mm512_set1_ps(AROWS ? ap[r * kKc] : ap[r]);
      acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
      if (NV == 2) acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
    }
  }
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? __mmask16(0xFFFF) : cols > 16 ? __mmask16((1u << (cols - 16)) - 1) : __mmask16(0);
  for (int r = 0; r < rows; ++r) {
    float* cr = c + r * ldc;
    __m512 v0 = acc[r][0], v1 = acc[r][1];
    if (accumulate) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, cr), v0);
      if (NV == 2) v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, cr + 16), v1);
    }
    _mm512_mask_storeu_ps(cr, m0, v0);
    if (NV == 2) _mm512_mask_storeu_ps(cr + 16, m1, v1);
  }
}

void micro_kernel(bool a_rows, int64_t kc, const float* ap, const float* bp, float* c, int64_t ldc, int64_t rows,
                  int64_t cols, bool accumulate) {
  if (a_rows) {
    if (cols <= 16) micro_kernel_nv<1, true>(kc, ap, bp, c, ldc, rows, cols, accumulate);
    else micro_kernel_nv<2, true>(kc, ap, bp, c, ldc, rows, cols, accumulate);
  } else {
    if (cols <= 16) micro_kernel_nv<1, false>(kc, ap, bp, c, ldc, rows, cols, accumulate);
    else micro_kernel_nv<2, false>(kc, ap, bp, c, ldc, rows, cols, accumulate);
  }
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f");
}
#else
void micro_kernel(bool, int64_t, const float*, const float*, float*, int64_t, int64_t, int64_t, bool) {}
bool cpu_has_avx512() { return false; }
#endif

}  // namespace

bool sgemm_avx512_available() {
  static const bool ok = cpu_has_avx512();
  return ok;
}

int64_t sgemm_avx512_packed_a_size(int64_t M, int64_t K) {
  return (M + kMr - 1) / kMr * kMr * ((std::max<int64_t>(K, 0) + kKc - 1) / kKc * kKc);   // whole K blocks
}

void sgemm_avx512_pack_a(bool trans_a, int64_t M, int64_t K, const float* A, int64_t lda, float* packed) {
  const int64_t mpad = (M + kMr - 1) / kMr * kMr, nblocks = (K + kKc - 1) / kKc;
  // K blocks are independent: the conv's weight packs (one per call, before its tile loop)
  // use the OpenMP pool; inside a parallel region (a tile's own GEMM) this stays serial.
#pragma omp parallel for schedule(static) if (nblocks > 1 && M * K > (1 << 16) && !omp_in_parallel())
  for (int64_t b = 0; b < nblocks; ++b)
    pack_a(trans_a, A, lda, 0, M, b * kKc, std::min(kKc, K - b * kKc), packed + b * kKc * mpad);
}

void sgemm_avx512_packed(bool trans_a, const float* packed_a, int64_t M, int64_t K, bool trans_b, int64_t N,
                         const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (beta == 0.f)
      for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.f);
    return;
  }
  const int64_t mpad = (M + kMr - 1) / kMr * kMr;
  for (int64_t jc = 0; jc < N; jc += kNc) {
    const int64_t nc = std::min(kNc, N - jc), nstrips = (nc + kNr - 1) / kNr;
    for (int64_t pc = 0; pc < K; pc += kKc) {
      const int64_t kc = std::min(kKc, K - pc);
      const bool accumulate = pc > 0 || beta != 0.f;
      float* bp = scratch(0, size_t(nstrips * kNr * kc));
      pack_b(trans_b, B, ldb, pc, kc, jc, nc, bp);
      const float* ablock = packed_a + pc * mpad;   // this K block's strips, 12 x kKc floats each
      for (int64_t ic = 0; ic < M; ic += kMc) {   // a row block's A strips stay in L2 across the B strips
        const int64_t mc = std::min(kMc, M - ic), mstrips = (mc + kMr - 1) / kMr;
        for (int64_t js = 0; js < nstrips; ++js)
          for (int64_t is = 0; is < mstrips; ++is)
            micro_kernel(!trans_a, kc, ablock + (ic / kMr + is) * kMr * kKc, bp + js * kNr * kc,
                         C + (ic + is * kMr) * ldc + jc + js * kNr, ldc, std::min(kMr, mc - is * kMr),
                         std::min(kNr, nc - js * kNr), accumulate);
      }
    }
  }
}

void sgemm_avx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  float* ap = scratch(1, size_t(std::max<int64_t>(sgemm_avx512_packed_a_size(M, K), 1)));
  sgemm_avx512_pack_a(trans_a, M, K, A, lda, ap);
  sgemm_avx512_packed(trans_a, ap, M, K, trans_b, N, B, ldb, beta, C, ldc);
}

}  // namespace oomlab
