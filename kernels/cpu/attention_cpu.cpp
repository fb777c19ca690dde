// attention_cpu.cpp — CPU kernels of fused attention (kernels/attention.h), float32 and
// float64. Forward, per query row: the Tk scores in a per-thread scratch row, max-shifted
// exp sums, lse = max + log(sum), then out = sum_j exp(s_j - lse) * keep_j / (1-p) * v_j.
// Backward, per (batch x head) slice, rows in order: recompute P = exp(s - lse), then with
// Di = dO_i . O_i: dV_j += P z dO_i, dS = P (z dO_i.v_j - Di), dQ_i += scale dS k_j,
// dK_j += scale dS q_i. Sums run in double; OpenMP over rows (forward) or slices
// (backward), each output element written by one thread in a fixed order, so results do
// not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/rng.h"
#include "kernels/attention.h"

namespace oomlab {
namespace {

// The dropout factor of probability element e: 0 (dropped) or 1 / (1 - p).
inline double keep_factor(const FusedAttentionArgs& a, uint64_t e) {
  if (a.p <= 0) return 1.0;
  const uint32_t w = Generator::block(a.seed, a.base, e / 4)[e % 4];
  // uint_to_unit_float(w) >= p, exactly as the dropout kernels decide it (24-bit uniforms)
  return (w >> 8) >= uint32_t(std::ceil(a.p * 16777216.0)) ? 1.0 / (1.0 - a.p) : 0.0;
}

// Scores of row i of slice bh into s (masked keys: -inf); returns their max.
template <class T>
double row_scores(const FusedAttentionArgs& a, int64_t bh, int64_t i, std::vector<double>& s) {
  const T* q = static_cast<const T*>(a.q) + (bh * a.Tq + i) * a.D;
  const T* k = static_cast<const T*>(a.k) + bh * a.Tk * a.D;
  const uint8_t* m = a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
  double mx = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < a.Tk; ++j) {
    if (m && m[j]) { s[size_t(j)] = -std::numeric_limits<double>::infinity(); continue; }
    double dot = 0;
    for (int64_t c = 0; c < a.D; ++c) dot += double(q[c]) * double(k[j * a.D + c]);
    s[size_t(j)] = a.scale * dot;
    mx = std::max(mx, s[size_t(j)]);
  }
  return mx;
}

constexpr int64_t kParallelMin = 32768;   // multiply-adds below which threads cost more than they save

template <class T> void fused_attention_forward_cpu(const FusedAttentionArgs& a) {
  const int64_t rows = a.BH * a.Tq;
#pragma omp parallel if (rows * a.Tk * (a.D + a.Dv) > kParallelMin)
  {
    std::vector<double> s(size_t(a.Tk)), acc(size_t(a.Dv));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t bh = r / a.Tq, i = r % a.Tq;
      T* o = static_cast<T*>(a.out) + r * a.Dv;
      T* lse = static_cast<T*>(a.lse) + r;
      const double mx = row_scores<T>(a, bh, i, s);
      std::fill(acc.begin(), acc.end(), 0.0);
      if (std::isinf(mx)) {   // every key padded: zeros, as masked_softmax
        for (int64_t c = 0; c < a.Dv; ++c) o[c] = T(0);
        *lse = T(-std::numeric_limits<double>::infinity());
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < a.Tk; ++j) sum += std::exp(s[size_t(j)] - mx);
      const double l = mx + std::log(sum);
      const T* v = static_cast<const T*>(a.v) + bh * a.Tk * a.Dv;
      for (int64_t j = 0; j < a.Tk; ++j) {
        const double pj = std::exp(s[size_t(j)] - l) * keep_factor(a, uint64_t(r * a.Tk + j));
        if (pj == 0) continue;
        for (int64_t c = 0; c < a.Dv; ++c) acc[size_t(c)] += pj * double(v[j * a.Dv + c]);
      }
      for (int64_t c = 0; c < a.Dv; ++c) o[c] = T(acc[size_t(c)]);
      *lse = T(l);
    }
  }
}

template <class T> void fused_attention_backward_cpu(const FusedAttentionArgs& a) {
#pragma omp parallel if (a.BH * a.Tq * a.Tk * (a.D + a.Dv) > kParallelMin)
  {
    std::vector<double> s(size_t(a.Tk)), dq(size_t(a.D)), dk, dv;
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < a.BH; ++bh) {
      dk.assign(size_t(a.Tk * a.D), 0.0);
      dv.assign(size_t(a.Tk * a.Dv), 0.0);
      const T* q = static_cast<const T*>(a.q) + bh * a.Tq * a.D;
      const T* k = static_cast<const T*>(a.k) + bh * a.Tk * a.D;
      const T* v = static_cast<const T*>(a.v) + bh * a.Tk * a.Dv;
      const T* o = static_cast<const T*>(a.out) + bh * a.Tq * a.Dv;
      const T* go = static_cast<const T*>(a.dout) + bh * a.Tq * a.Dv;
      const T* lse = static_cast<const T*>(a.lse) + bh * a.Tq;
      T* gq = static_cast<T*>(a.dq) + bh * a.Tq * a.D;
      for (int64_t i = 0; i < a.Tq; ++i) {
        std::fill(dq.begin(), dq.end(), 0.0);
        const double l = double(lse[i]);
        if (!std::isinf(l)) {
          row_scores<T>(a, bh, i, s);
          double di = 0;
          for (int64_t c = 0; c < a.Dv; ++c) di += double(go[i * a.Dv + c]) * double(o[i * a.Dv + c]);
          for (int64_t j = 0; j < a.Tk; ++j) {
            const double p = std::exp(s[size_t(j)] - l);
            if (p == 0) continue;
            const double z = keep_factor(a, uint64_t((bh * a.Tq + i) * a.Tk + j));
            double dp = 0;
            for (int64_t c = 0; c < a.Dv; ++c) {
              dp += double(go[i * a.Dv + c]) * double(v[j * a.Dv + c]);
              dv[size_t(j * a.Dv + c)] += p * z * double(go[i * a.Dv + c]);
            }
            const double ds = a.scale * p * (z * dp - di);
            for (int64_t c = 0; c < a.D; ++c) {
              dq[size_t(c)] += ds * double(k[j * a.D + c]);
              dk[size_t(j * a.D + c)] += ds * double(q[i * a.D + c]);
            }
          }
        }
        for (int64_t c = 0; c < a.D; ++c) gq[i * a.D + c] = T(dq[size_t(c)]);
      }
      T* gk = static_cast<T*>(a.dk) + bh * a.Tk * a.D;
      T* gv = static_cast<T*>(a.dv) + bh * a.Tk * a.Dv;
      for (int64_t e = 0; e < a.Tk * a.D; ++e) gk[e] = T(dk[size_t(e)]);
      for (int64_t e = 0; e < a.Tk * a.Dv; ++e) gv[e] = T(dv[size_t(e)]);
    }
  }
}

}  // namespace

void register_attention_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(fused_attention_forward_kernels(), fused_attention_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(fused_attention_backward_kernels(), fused_attention_backward_cpu);
}

}  // namespace oomlab
