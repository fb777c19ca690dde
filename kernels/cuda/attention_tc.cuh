// attention_tc.cuh — the bodies of the tensor-core fused-attention kernels (attention_tc.cu,
// behind OOMLAB_CUDA_TC_ATTENTION; head dims of 64), written for an executor context as
// attention_tiled.cuh's, so that CPU CI runs them on emulated thread blocks
// (kernels/cuda/check/attention_tc_check.cu). FlashAttention-2's loop order with every
// matrix product on TF32 tensor cores (16x16x8 warp tiles, float32 accumulation): float32
// data rounded to TF32 (exact for float16 / bfloat16 inputs, whose float32 copies the op
// passes); softmax, masks, dropout and the running statistics in float32 on CUDA cores.
// A context provides tid(), bx(), by(), sync() (the block), pair_max / pair_sum (lanes
// l and l ^ 1) and mma<BCol>(c, ldc, a, lda, b, ldb, K, accumulate): per warp, the 16x16
// float block c (row-major, ldc) = [c +] A (16 x K, row-major, lda) . B (K x 16; B(k, n) =
// b[k*ldb + n], or b[n*ldb + k] with BCol), operands rounded to TF32. Every thread calls
// sync, the pair reductions and mma the same number of times (block-uniform loops); a
// warp's lanes read and write shared memory only between syncs around its mma calls.
// Layout: 4 warps; warp w owns 16 rows (queries: forward, dQ; keys: dK / dV) of the block's
// 64; lane l works on row l / 2 of the warp's 16, columns of half l % 2.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cuda/attention_keep.cuh"

namespace oomlab::tc {
constexpr int kD = 64;              // head dims D = Dv
constexpr int kWarps = 4, kThreads = 128, kRows = 64;
constexpr int kTile = 32;           // rows of the other side per step
constexpr int kLd = kD + 4, kLdT = kTile + 4;   // padded leading dimensions (multiples of 4)

using Keep = cuda::AttentionKeep;

struct __align__(32) FwdSmem {
  float q[kRows][kLd];              // the block's query rows (zeros past Tq)
  float k[kTile][kLd], v[kTile][kLd];
  float s[kWarps][16][kLdT];        // scores, then the dropped probabilities
  float o[kWarps][16][kLd];         // output accumulators
};
struct __align__(32) DqSmem {
  float q[kRows][kLd], go[kRows][kLd];   // query rows and their dO
  float k[kTile][kLd], v[kTile][kLd];
  float s[kWarps][16][kLdT], dp[kWarps][16][kLdT];
  float dq[kWarps][16][kLd];
};
struct __align__(32) DkvSmem {
  float k[kRows][kLd], v[kRows][kLd];    // the block's key and value rows
  float q[kTile][kLd], go[kTile][kLd];   // a query tile and its dO
  float lse[kTile], di[kTile];
  float st[kWarps][16][kLdT], dpt[kWarps][16][kLdT];   // S^T and dP^T of the warp's keys
  float dk[kWarps][16][kLd], dv[kWarps][16][kLd];
};

// Rows [r0, r0 + n) of a [rows, kD] matrix into dst (zeros past `rows`), by all threads.
template <int kLdDst>
__host__ __device__ inline void stage(int tid, float (*dst)[kLdDst], const float* src, int64_t r0, int64_t rows,
                                      int n) {
  for (int idx = tid; idx < n * kD; idx += kThreads) {
    const int r = idx / kD, c = idx % kD;
    dst[r][c] = r0 + r < rows ? src[(r0 + r) * kD + c] : 0.0f;
  }
}

// Whether query i may attend key j (padding, causal, bounds).
__host__ __device__ inline bool visible(const FusedAttentionArgs& a, const uint8_t* m, int64_t i, int64_t j) {
  return i < a.Tq && j < a.Tk && !(m && m[j]) && !(a.causal && j > i);
}

template <class Ctx>
__host__ __device__ void fwd_body(const Ctx& x, const FusedAttentionArgs& a, uint32_t thr, FwdSmem& sm) {
  const int tid = x.tid(), w = tid / 32, rr = (tid % 32) / 2, h = tid % 2;
  const int64_t bh = x.by(), q0 = x.bx() * kRows, i = q0 + w * 16 + rr;
  const float* kb = static_cast<const float*>(a.k) + bh * a.Tk * kD;
  const float* vb = static_cast<const float*>(a.v) + bh * a.Tk * kD;
  const uint8_t* m = a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
  stage(tid, sm.q, static_cast<const float*>(a.q) + bh * a.Tq * kD, q0, a.Tq, kRows);
  for (int c = 32 * h; c < 32 * h + 32; ++c) sm.o[w][rr][c] = 0.0f;
  float mx = -INFINITY, l = 0.0f;
  Keep keep{a.seed, a.base, ~uint64_t(0), thr, float(1.0 / (1.0 - a.p))};
  for (int64_t t0 = 0; t0 < a.Tk && !(a.causal && t0 > q0 + kRows - 1); t0 += kTile) {   // block-uniform
    stage(tid, sm.k, kb, t0, a.Tk, kTile);
    stage(tid, sm.v, vb, t0, a.Tk, kTile);
    x.sync();
    for (int nb = 0; nb < kTile / 16; ++nb)   // S = Q K^T
      x.template mma<true>(&sm.s[w][0][16 * nb], kLdT, &sm.q[16 * w][0], kLd, &sm.k[16 * nb][0], kLd, kD, false);
    x.sync();
    float tmax = -INFINITY;
    for (int c = 16 * h; c < 16 * h + 16; ++c) {
      const float s = visible(a, m, i, t0 + c) ? float(a.scale) * sm.s[w][rr][c] : -INFINITY;
      sm.s[w][rr][c] = s;
      tmax = s > tmax ? s : tmax;
    }
    tmax = x.pair_max(tmax);
    const float mnew = tmax > mx ? tmax : mx;
    const float f = mx == -INFINITY ? 0.0f : expf(mx - mnew);   // rescale what was summed under the old max
    l *= f;
    for (int c = 32 * h; c < 32 * h + 32; ++c) sm.o[w][rr][c] *= f;
    mx = mnew;
    for (int c = 16 * h; c < 16 * h + 16; ++c) {
      const float s = sm.s[w][rr][c];
      const float pj = s == -INFINITY ? 0.0f : expf(s - mx);
      l += pj;
      sm.s[w][rr][c] = a.p > 0 && pj != 0.0f ? pj * keep(uint64_t((bh * a.Tq + i) * a.Tk + t0 + c)) : pj;
    }
    x.sync();
    for (int nb = 0; nb < kD / 16; ++nb)   // O += P V
      x.template mma<false>(&sm.o[w][0][16 * nb], kLd, &sm.s[w][0][0], kLdT, &sm.v[0][16 * nb], kLd, kTile, true);
    x.sync();
  }
  const float total = x.pair_sum(l);
  if (i >= a.Tq) return;
  const bool empty = mx == -INFINITY;
  float* o = static_cast<float*>(a.out) + (bh * a.Tq + i) * kD;
  for (int c = 32 * h; c < 32 * h + 32; ++c) o[c] = empty ? 0.0f : sm.o[w][rr][c] / total;
  if (h == 0) static_cast<float*>(a.lse)[bh * a.Tq + i] = empty ? -INFINITY : mx + logf(total);
}

// Di = dO_i . O_i of query row i (0 past Tq), summed by the lane pair: 32 dims each.
template <class Ctx>
__host__ __device__ float row_di(const Ctx& x, const FusedAttentionArgs& a, int64_t bh, int64_t i, int h) {
  float d = 0.0f;
  if (i < a.Tq) {
    const float* go = static_cast<const float*>(a.dout) + (bh * a.Tq + i) * kD;
    const float* o = static_cast<const float*>(a.out) + (bh * a.Tq + i) * kD;
    for (int c = 32 * h; c < 32 * h + 32; ++c) d = fmaf(go[c], o[c], d);
  }
  return x.pair_sum(d);
}

// dQ for the block's 64 query rows: per key tile S = Q K^T and dP = dO V^T on tensor cores,
// dS = P (Z dP - Di) scaled on CUDA cores, dQ += dS K on tensor cores.
template <class Ctx>
__host__ __device__ void dq_body(const Ctx& x, const FusedAttentionArgs& a, uint32_t thr, DqSmem& sm) {
  const int tid = x.tid(), w = tid / 32, rr = (tid % 32) / 2, h = tid % 2;
  const int64_t bh = x.by(), q0 = x.bx() * kRows, i = q0 + w * 16 + rr;
  const float* kb = static_cast<const float*>(a.k) + bh * a.Tk * kD;
  const float* vb = static_cast<const float*>(a.v) + bh * a.Tk * kD;
  const uint8_t* m = a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
  stage(tid, sm.q, static_cast<const float*>(a.q) + bh * a.Tq * kD, q0, a.Tq, kRows);
  stage(tid, sm.go, static_cast<const float*>(a.dout) + bh * a.Tq * kD, q0, a.Tq, kRows);
  for (int c = 32 * h; c < 32 * h + 32; ++c) sm.dq[w][rr][c] = 0.0f;
  const float di = row_di(x, a, bh, i, h);
  const float lse = i < a.Tq ? static_cast<const float*>(a.lse)[bh * a.Tq + i] : -INFINITY;
  Keep keep{a.seed, a.base, ~uint64_t(0), thr, float(1.0 / (1.0 - a.p))};
  for (int64_t t0 = 0; t0 < a.Tk && !(a.causal && t0 > q0 + kRows - 1); t0 += kTile) {
    stage(tid, sm.k, kb, t0, a.Tk, kTile);
    stage(tid, sm.v, vb, t0, a.Tk, kTile);
    x.sync();
    for (int nb = 0; nb < kTile / 16; ++nb) {
      x.template mma<true>(&sm.s[w][0][16 * nb], kLdT, &sm.q[16 * w][0], kLd, &sm.k[16 * nb][0], kLd, kD, false);
      x.template mma<true>(&sm.dp[w][0][16 * nb], kLdT, &sm.go[16 * w][0], kLd, &sm.v[16 * nb][0], kLd, kD, false);
    }
    x.sync();
    for (int c = 16 * h; c < 16 * h + 16; ++c) {
      const int64_t j = t0 + c;
      float ds = 0.0f;
      if (visible(a, m, i, j) && lse != -INFINITY) {
        const float pj = expf(float(a.scale) * sm.s[w][rr][c] - lse);
        const float z = a.p > 0 ? keep(uint64_t((bh * a.Tq + i) * a.Tk + j)) : 1.0f;
        ds = pj * (z * sm.dp[w][rr][c] - di) * float(a.scale);
      }
      sm.s[w][rr][c] = ds;
    }
    x.sync();
    for (int nb = 0; nb < kD / 16; ++nb)   // dQ += dS K
      x.template mma<false>(&sm.dq[w][0][16 * nb], kLd, &sm.s[w][0][0], kLdT, &sm.k[0][16 * nb], kLd, kTile, true);
    x.sync();
  }
  if (i >= a.Tq) return;
  float* dq = static_cast<float*>(a.dq) + (bh * a.Tq + i) * kD;
  for (int c = 32 * h; c < 32 * h + 32; ++c) dq[c] = sm.dq[w][rr][c];
}

// A query tile of dK / dV's loop into shared memory, with each row's lse and Di.
template <class Ctx>
__host__ __device__ void stage_queries(const Ctx& x, const FusedAttentionArgs& a, int64_t bh, int64_t t0, DkvSmem& sm) {
  const int tid = x.tid();
  stage(tid, sm.q, static_cast<const float*>(a.q) + bh * a.Tq * kD, t0, a.Tq, kTile);
  stage(tid, sm.go, static_cast<const float*>(a.dout) + bh * a.Tq * kD, t0, a.Tq, kTile);
  if (tid < kTile) {
    const int64_t i = t0 + tid;
    float d = 0.0f;
    if (i < a.Tq) {
      const float* go = static_cast<const float*>(a.dout) + (bh * a.Tq + i) * kD;
      const float* o = static_cast<const float*>(a.out) + (bh * a.Tq + i) * kD;
      for (int c = 0; c < kD; ++c) d = fmaf(go[c], o[c], d);
    }
    sm.di[tid] = d;
    sm.lse[tid] = i < a.Tq ? static_cast<const float*>(a.lse)[bh * a.Tq + i] : -INFINITY;
  }
}

// dK / dV for the block's 64 key rows: per query tile S^T = K Q^T and dP^T = V dO^T on
// tensor cores, P and dS on CUDA cores, dV += (Z P)^T dO and dK += dS^T Q on tensor cores.
template <class Ctx>
__host__ __device__ void dkv_body(const Ctx& x, const FusedAttentionArgs& a, uint32_t thr, DkvSmem& sm) {
  const int tid = x.tid(), w = tid / 32, rr = (tid % 32) / 2, h = tid % 2;
  const int64_t bh = x.by(), k0 = x.bx() * kRows, j = k0 + w * 16 + rr;
  const uint8_t* m = a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
  stage(tid, sm.k, static_cast<const float*>(a.k) + bh * a.Tk * kD, k0, a.Tk, kRows);
  stage(tid, sm.v, static_cast<const float*>(a.v) + bh * a.Tk * kD, k0, a.Tk, kRows);
  for (int c = 32 * h; c < 32 * h + 32; ++c) sm.dk[w][rr][c] = sm.dv[w][rr][c] = 0.0f;
  Keep keep{a.seed, a.base, ~uint64_t(0), thr, float(1.0 / (1.0 - a.p))};
  // causal: query tiles whose last row precedes the block's first key see none of its keys
  for (int64_t t0 = a.causal ? (k0 / kTile) * kTile : 0; t0 < a.Tq; t0 += kTile) {
    stage_queries(x, a, bh, t0, sm);
    x.sync();
    for (int nb = 0; nb < kTile / 16; ++nb) {
      x.template mma<true>(&sm.st[w][0][16 * nb], kLdT, &sm.k[16 * w][0], kLd, &sm.q[16 * nb][0], kLd, kD, false);
      x.template mma<true>(&sm.dpt[w][0][16 * nb], kLdT, &sm.v[16 * w][0], kLd, &sm.go[16 * nb][0], kLd, kD, false);
    }
    x.sync();
    for (int c = 16 * h; c < 16 * h + 16; ++c) {
      const int64_t i = t0 + c;
      float pz = 0.0f, ds = 0.0f;
      if (visible(a, m, i, j) && sm.lse[c] != -INFINITY) {
        const float pj = expf(float(a.scale) * sm.st[w][rr][c] - sm.lse[c]);
        const float z = a.p > 0 ? keep(uint64_t((bh * a.Tq + i) * a.Tk + j)) : 1.0f;
        pz = pj * z;
        ds = pj * (z * sm.dpt[w][rr][c] - sm.di[c]) * float(a.scale);
      }
      sm.st[w][rr][c] = pz;
      sm.dpt[w][rr][c] = ds;
    }
    x.sync();
    for (int nb = 0; nb < kD / 16; ++nb) {
      x.template mma<false>(&sm.dv[w][0][16 * nb], kLd, &sm.st[w][0][0], kLdT, &sm.go[0][16 * nb], kLd, kTile, true);
      x.template mma<false>(&sm.dk[w][0][16 * nb], kLd, &sm.dpt[w][0][0], kLdT, &sm.q[0][16 * nb], kLd, kTile, true);
    }
    x.sync();
  }
  if (j >= a.Tk) return;
  float* dk = static_cast<float*>(a.dk) + (bh * a.Tk + j) * kD;
  float* dv = static_cast<float*>(a.dv) + (bh * a.Tk + j) * kD;
  for (int c = 32 * h; c < 32 * h + 32; ++c) {
    dk[c] = sm.dk[w][rr][c];
    dv[c] = sm.dv[w][rr][c];
  }
}

}  // namespace oomlab::tc
