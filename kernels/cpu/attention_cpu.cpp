// attention_cpu.cpp — CPU kernels of fused attention (kernels/attention.h), float32 and
// float64, FlashAttention's blocking on BLAS: query rows in blocks of kRows; per block the
// scores S = scale Q_b K^T are one GEMM into a per-thread [kRows, Tk] scratch (never a
// [Tq, Tk] buffer), then per row max-shifted exps E (sum in double), lse = max + log(sum),
// E x keep / (1-p) in place, O_b = E V a second GEMM and O_b's rows scaled by 1 / sum.
// Backward, per (batch x head) slice, blocks in order: recompute S and P from lse; with
// Z the dropout factors and Di = dO_i . O_i: dV += (P Z)^T dO_b, dP = dO_b V^T,
// dS = scale P (Z dP - Di), dQ_b = dS K, dK += dS^T Q_b -- five GEMMs per block (eager
// attention's backward has four: the recomputed S is the price of not saving P).
// Threading: OpenMP over (slice, block) in forward, over slices in backward (dK and dV sum
// over a slice's blocks in block order); BLAS runs single-threaded inside (BlasThreadsGuard,
// as the conv kernels; the region's thread count is read before it), so each output element
// is computed by one thread in a fixed order and results do not depend on the thread count.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/core/rng.h"
#include "engine/core/thread_budget.h"
#include "kernels/attention.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/philox_cpu.h"

namespace oomlab {
namespace {

constexpr int64_t kRows = 64;             // query rows per block (128 and 256 measured slower)
constexpr int64_t kParallelMin = 32768;   // multiply-adds below which threads cost more than they save

// C[M, N] = alpha op(A) op(B) + beta C, row-major, single-threaded BLAS (see the header).
template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const auto ta_ = ta ? CblasTrans : CblasNoTrans, tb_ = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta_, tb_, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
  else
    cblas_dgemm(CblasRowMajor, ta_, tb_, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

// The dropout factors of rows [r0, r0 + n) (probability elements e = r * Tk + j, one
// contiguous range): 0 (dropped) or 1 / (1 - p), exactly as the dropout kernels decide
// (24-bit uniforms >= p), from the same vectorised Philox, into z[(r - r0) * Tk + j], or,
// with multiply, applied to z in place (z *= factor).
template <class T> void keep_factors(const FusedAttentionArgs& a, int64_t r0, int64_t n, T* z, bool multiply) {
  const uint32_t threshold = uint32_t(std::ceil(a.p * 16777216.0));
  const T kept = T(1.0 / (1.0 - a.p));
  const uint64_t e0 = uint64_t(r0 * a.Tk), e1 = e0 + uint64_t(n * a.Tk);
  uint32_t words[4 * kPhiloxBatch];
  for (uint64_t b0 = e0 / 4; b0 * 4 < e1; b0 += kPhiloxBatch) {
    const int64_t nb = int64_t(std::min<uint64_t>(kPhiloxBatch, (e1 + 3) / 4 - b0));
    philox_words(a.seed, a.base + b0, nb, words);
    // words[i] is element b0 * 4 + i; only [e0, e1) is wanted (the range's first and last
    // batches may start or end inside a block)
    const int64_t lo = std::max<int64_t>(0, int64_t(e0) - int64_t(b0 * 4));
    const int64_t hi = std::min<int64_t>(4 * nb, int64_t(e1) - int64_t(b0 * 4));
    T* out = z + (int64_t(b0 * 4) + lo - int64_t(e0));   // where words[lo] goes
    if (multiply) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) out[i - lo] *= (words[i] >> 8) >= threshold ? kept : T(0);
    } else {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) out[i - lo] = (words[i] >> 8) >= threshold ? kept : T(0);
    }
  }
}

// Rows [i0, i0 + n) of slice bh: s = scale q k^T (one GEMM).
template <class T> void scores(const FusedAttentionArgs& a, int64_t bh, int64_t i0, int64_t n, T* s) {
  gemm<T>(false, true, n, a.Tk, a.D, T(a.scale), static_cast<const T*>(a.q) + (bh * a.Tq + i0) * a.D, a.D,
          static_cast<const T*>(a.k) + bh * a.Tk * a.D, a.D, T(0), s, a.Tk);
}

// Causal: in rows [i0, i0 + n) of the [n, Tk] block s, the keys after each row's query set
// to `value` (-inf before the softmax, 0 after the exps).
template <class T> void cut_future(const FusedAttentionArgs& a, int64_t i0, int64_t n, T* s, T value) {
  if (!a.causal) return;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i0 + i + 1; j < a.Tk; ++j) s[i * a.Tk + j] = value;
}

// In place: row[j] = exp(row[j] - shift), 0 for padded keys (mask may be null). exp_t:
// fast_math.h's vectorisable exp.
template <class T> void exp_shifted(T* row, int64_t n, T shift, const uint8_t* m) {
  for (int64_t j = 0; j < n; ++j) row[j] = exp_t(T(row[j] - shift));
  if (m)
    for (int64_t j = 0; j < n; ++j)
      if (m[j]) row[j] = T(0);
}

// Backward, in place, with each row's lse: p = exp(s - lse), 0 for padded keys and for rows
// whose every key is padded (lse -inf).
template <class T> void to_probabilities(const FusedAttentionArgs& a, int64_t bh, int64_t n, const T* lse, T* s) {
  const uint8_t* m = a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    T* row = s + i * a.Tk;
    if (std::isinf(lse[i]))
      std::fill(row, row + a.Tk, T(0));
    else
      exp_shifted(row, a.Tk, lse[i], m);
  }
}

// The largest unpadded score of a row (-inf when every key is padded; mask may be null).
template <class T> T row_max(const T* row, int64_t n, const uint8_t* m) {
  T mx = -std::numeric_limits<T>::infinity();
  if (m) {
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, m[j] ? -std::numeric_limits<T>::infinity() : row[j]);
  } else {
#pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, row[j]);
  }
  return mx;
}

// Forward, in place: each row's softmax numerators e = exp(s - max) (padded keys 0; a row
// whose every key is padded all 0), the reciprocal of their sum in inv (0 for such a row) and
// the log-sum-exp (max + log(sum); -inf for such a row): masked_softmax's p is e x inv, which
// the caller applies to the n x Dv output rather than to the n x Tk numerators (as
// FlashAttention does). One exp per element (exp_t); the sum in double over fixed lanes.
template <class T>
void softmax_numerators(const FusedAttentionArgs& a, int64_t bh, int64_t n, T* s, T* lse, T* inv) {
  const uint8_t* m = a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    T* row = s + i * a.Tk;
    const T mx = row_max(row, a.Tk, m);
    if (std::isinf(mx)) {
      lse[i] = -std::numeric_limits<T>::infinity();
      inv[i] = T(0);
      std::fill(row, row + a.Tk, T(0));
      continue;
    }
    exp_shifted(row, a.Tk, mx, m);
    const double sum = lane_sum(a.Tk, [&](int64_t j) { return row[j]; });
    inv[i] = T(1.0 / sum);
    lse[i] = T(double(mx) + std::log(sum));
  }
}

template <class T> void fused_attention_forward_cpu(const FusedAttentionArgs& a) {
  const int64_t blocks = (a.Tq + kRows - 1) / kRows, tasks = a.BH * blocks;
  const int threads = omp_get_max_threads();   // before the guard: see thread_budget.h
  BlasThreadsGuard serial_blas(1);
#pragma omp parallel num_threads(threads) if (a.BH * a.Tq * a.Tk * (a.D + a.Dv) > kParallelMin)
  {
    std::vector<T> s(size_t(kRows * a.Tk)), inv(static_cast<size_t>(kRows));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t bh = t / blocks, i0 = (t % blocks) * kRows, n = std::min(kRows, a.Tq - i0);
      T* lse = static_cast<T*>(a.lse) + bh * a.Tq + i0;
      T* out = static_cast<T*>(a.out) + (bh * a.Tq + i0) * a.Dv;
      scores<T>(a, bh, i0, n, s.data());
      cut_future(a, i0, n, s.data(), -std::numeric_limits<T>::infinity());
      softmax_numerators<T>(a, bh, n, s.data(), lse, inv.data());
      cut_future(a, i0, n, s.data(), T(0));
      if (a.p > 0) keep_factors(a, bh * a.Tq + i0, n, s.data(), true);
      gemm<T>(false, false, n, a.Dv, a.Tk, T(1), s.data(), a.Tk, static_cast<const T*>(a.v) + bh * a.Tk * a.Dv, a.Dv,
              T(0), out, a.Dv);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < a.Dv; ++c) out[i * a.Dv + c] *= inv[size_t(i)];
    }
  }
}

template <class T> void fused_attention_backward_cpu(const FusedAttentionArgs& a) {
  const int threads = omp_get_max_threads();
  BlasThreadsGuard serial_blas(1);
#pragma omp parallel num_threads(threads) if (a.BH * a.Tq * a.Tk * (a.D + a.Dv) > kParallelMin)
  {
    std::vector<T> p(size_t(kRows * a.Tk)), dp(size_t(kRows * a.Tk)), z(size_t(kRows * a.Tk), T(1));
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < a.BH; ++bh) {
      const T* q = static_cast<const T*>(a.q) + bh * a.Tq * a.D;
      const T* k = static_cast<const T*>(a.k) + bh * a.Tk * a.D;
      const T* v = static_cast<const T*>(a.v) + bh * a.Tk * a.Dv;
      const T* o = static_cast<const T*>(a.out) + bh * a.Tq * a.Dv;
      const T* go = static_cast<const T*>(a.dout) + bh * a.Tq * a.Dv;
      const T* lse = static_cast<const T*>(a.lse) + bh * a.Tq;
      T* gq = static_cast<T*>(a.dq) + bh * a.Tq * a.D;
      T* gk = static_cast<T*>(a.dk) + bh * a.Tk * a.D;
      T* gv = static_cast<T*>(a.dv) + bh * a.Tk * a.Dv;
      std::fill(gk, gk + a.Tk * a.D, T(0));
      std::fill(gv, gv + a.Tk * a.Dv, T(0));
      for (int64_t i0 = 0; i0 < a.Tq; i0 += kRows) {
        const int64_t n = std::min(kRows, a.Tq - i0);
        scores<T>(a, bh, i0, n, p.data());
        to_probabilities<T>(a, bh, n, lse + i0, p.data());
        cut_future(a, i0, n, p.data(), T(0));
        gemm<T>(false, true, n, a.Tk, a.Dv, T(1), go + i0 * a.Dv, a.Dv, v, a.Dv, T(0), dp.data(), a.Tk);   // dP
        if (a.p > 0) keep_factors(a, bh * a.Tq + i0, n, z.data(), false);
        for (int64_t i = 0; i < n; ++i) {
          const T* zr = z.data() + i * a.Tk;
          double di = 0;
          for (int64_t c = 0; c < a.Dv; ++c) di += double(go[(i0 + i) * a.Dv + c]) * double(o[(i0 + i) * a.Dv + c]);
          T* pr = p.data() + i * a.Tk;
          T* dr = dp.data() + i * a.Tk;
          const T scale = T(a.scale), d = T(di);
          for (int64_t j = 0; j < a.Tk; ++j) {
            dr[j] = scale * pr[j] * (zr[j] * dr[j] - d);   // dS
            pr[j] *= zr[j];                                // the dropped probabilities
          }
        }
        gemm<T>(true, false, a.Tk, a.Dv, n, T(1), p.data(), a.Tk, go + i0 * a.Dv, a.Dv, T(1), gv, a.Dv);   // dV +=
        gemm<T>(false, false, n, a.D, a.Tk, T(1), dp.data(), a.Tk, k, a.D, T(0), gq + i0 * a.D, a.D);      // dQ
        gemm<T>(true, false, a.Tk, a.D, n, T(1), dp.data(), a.Tk, q + i0 * a.D, a.D, T(1), gk, a.D);      // dK +=
      }
    }
  }
}

}  // namespace

void register_attention_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(fused_attention_forward_kernels(), fused_attention_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(fused_attention_backward_kernels(), fused_attention_backward_cpu);
}

}  // namespace oomlab
