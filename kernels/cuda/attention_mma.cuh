// attention_mma.cuh — the bodies of the 16-bit tensor-core fused-attention kernels
// (attention_mma.cu, behind OOMLAB_CUDA_MMA_ATTENTION; head dims of 64), written for an
// executor context so that CPU CI runs them on emulated warps (kernels/cuda/check/
// attention_mma_check.cu). FlashAttention-2's scheme (Dao 2023) on mma.sync.m16n8k16 with
// float16 / bfloat16 operands and float32 accumulators: the scores, probabilities, dP and dS
// live in the accumulator registers, and an accumulator pair is reused as the A operand of the
// next product (the probabilities and dS rounded to the 16-bit type there, as FlashAttention
// does); only the other side's tiles pass through shared memory, as 16-bit pairs.
// Inputs are the op's float32 copies of 16-bit tensors (FusedAttentionArgs::from_16bit;
// from_f16 says which type), so staging them as 16-bit values is exact.
// A context provides tid(), bx(), by(), sync() (the block), quad_max / quad_sum (the 4 lanes
// of a row: l ^ 1, l ^ 2), pack(lo, hi) (two floats rounded to the 16-bit type, lo in the low
// half) and mma(c, a, b): per warp, c (16 x 8 float32) += A (16 x 16) . B (16 x 8) with the
// PTX ISA's fragment layouts for m16n8k16 (g = lane / 4, t = lane % 4):
//   A: a[0] = A(g, 2t..2t+1), a[1] = A(g+8, 2t..), a[2] = A(g, 2t+8..), a[3] = A(g+8, 2t+8..);
//   B: b[0] = B(2t..2t+1, g), b[1] = B(2t+8..2t+9, g);
//   C: c[0..1] = C(g, 2t..2t+1), c[2..3] = C(g+8, 2t..2t+1).
// Every thread calls sync, the quad reductions and mma the same number of times
// (block-uniform loops). Layout: 4 warps; warp w owns 16 rows (queries: forward, dQ; keys:
// dK / dV) of the block's 64; the other side streams by in tiles of 64 (forward) or 32
// (backward) rows.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/cuda/attention_flash.cuh"   // stage_row_stats: lse and Di of a row tile
#include "kernels/cuda/attention_keep.cuh"

namespace oomlab::mma {
constexpr int kD = 64;                       // head dims D = Dv
constexpr int kWarps = 4, kThreads = 128, kRows = 64;
constexpr int kFwdTile = 64, kBwdTile = 32;  // rows of the other side per step
// Padded leading dimensions (in 16-bit elements): a row of 72 is 36 words, so the 8 rows x
// 4 pairs a fragment load touches fall in 32 distinct banks; 40 (20 words) likewise.
constexpr int kLd = kD + 8, kLdF = kFwdTile + 8, kLdB = kBwdTile + 8;

using Keep = cuda::AttentionKeep;

struct __align__(16) FwdSmem {
  uint16_t q[kRows][kLd];          // the block's query rows (zeros past Tq)
  uint16_t k[kFwdTile][kLd];       // the key tile
  uint16_t vt[kD][kLdF];           // the value tile, transposed
};
struct __align__(16) DqSmem {
  uint16_t q[kRows][kLd], go[kRows][kLd];   // the block's query rows and their dO
  uint16_t k[kBwdTile][kLd], v[kBwdTile][kLd];
  uint16_t kt[kD][kLdB];                    // the key tile, transposed
  float lse[kRows], di[kRows];
};
struct __align__(16) DkvSmem {
  uint16_t k[kRows][kLd], v[kRows][kLd];    // the block's key and value rows
  uint16_t q[kBwdTile][kLd], go[kBwdTile][kLd];
  uint16_t qt[kD][kLdB], got[kD][kLdB];     // the query tile and its dO, transposed
  float lse[kBwdTile], di[kBwdTile];
};

// Two adjacent 16-bit elements as one 32-bit word (the lower index in the low half).
__host__ __device__ inline uint32_t ld2(const uint16_t* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}
__host__ __device__ inline void st2(uint16_t* p, uint32_t v) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<uint32_t*>(p) = v;
#else
  std::memcpy(p, &v, 4);
#endif
}

// Rows [r0, r0 + n) of a [rows, kD] float32 matrix into dst[n][kLd] as 16-bit values (zeros
// past `rows`), by all threads.
template <class Ctx>
__host__ __device__ void stage_rows(const Ctx& x, uint16_t (*dst)[kLd], const float* src, int64_t r0, int64_t rows,
                                    int n) {
  for (int idx = x.tid(); idx < n * kD / 2; idx += kThreads) {
    const int r = idx / (kD / 2), c = 2 * (idx % (kD / 2));
    const bool in = r0 + r < rows;
    const float* s = src + (r0 + r) * kD + c;
    st2(&dst[r][c], x.pack(in ? s[0] : 0.0f, in ? s[1] : 0.0f));
  }
}

// The same rows transposed: dst[c][r] for the kD columns c (n even; zeros past `rows`).
template <int kLdT, class Ctx>
__host__ __device__ void stage_cols(const Ctx& x, uint16_t (*dst)[kLdT], const float* src, int64_t r0, int64_t rows,
                                    int n) {
  for (int idx = x.tid(); idx < n * kD / 2; idx += kThreads) {
    const int c = idx % kD, r = 2 * (idx / kD);
    const float lo = r0 + r < rows ? src[(r0 + r) * kD + c] : 0.0f;
    const float hi = r0 + r + 1 < rows ? src[(r0 + r + 1) * kD + c] : 0.0f;
    st2(&dst[c][r], x.pack(lo, hi));
  }
}

// The A fragment of the 16 x 16 block at `base` of a row-major 16-bit tile (leading dim ld).
__host__ __device__ inline void load_a(uint32_t (&a)[4], const uint16_t* base, int ld, int lane) {
  const int g = lane >> 2, t = lane & 3;
  a[0] = ld2(base + g * ld + 2 * t);
  a[1] = ld2(base + (g + 8) * ld + 2 * t);
  a[2] = ld2(base + g * ld + 2 * t + 8);
  a[3] = ld2(base + (g + 8) * ld + 2 * t + 8);
}
// The B fragment (16 x 8) with B(k, n) = base[n * ld + k]: the tile's rows are B's columns.
__host__ __device__ inline void load_b(uint32_t (&b)[2], const uint16_t* base, int ld, int lane) {
  const int g = lane >> 2, t = lane & 3;
  b[0] = ld2(base + g * ld + 2 * t);
  b[1] = ld2(base + g * ld + 2 * t + 8);
}
// The A fragment of a 16 x 16 block held as two accumulators (columns 0..7 and 8..15).
template <class Ctx>
__host__ __device__ void acc_to_a(const Ctx& x, uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = x.pack(c0[0], c0[1]);
  a[1] = x.pack(c0[2], c0[3]);
  a[2] = x.pack(c1[0], c1[1]);
  a[3] = x.pack(c1[2], c1[3]);
}

// Whether query i may attend key j (padding, causal, bounds).
__host__ __device__ inline bool visible(const FusedAttentionArgs& a, const uint8_t* m, int64_t i, int64_t j) {
  return i < a.Tq && j < a.Tk && !(m && m[j]) && !(a.causal && j > i);
}
__host__ __device__ inline Keep make_keep(const FusedAttentionArgs& a, uint32_t thr) {
  return Keep{a.seed, a.base, ~uint64_t(0), thr, float(1.0 / (1.0 - a.p))};
}
__host__ __device__ inline const uint8_t* mask_of(const FusedAttentionArgs& a, int64_t bh) {
  return a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
}

// c[nt] (+)= A . B_nt for NT accumulators: A the 16 x 64 block held as four A fragments
// (a[kc]: columns 16 kc..), B_nt(k, n) = tile[8 nt + n][k]: a warp's rows against NT x 8 rows
// of a row-major 16-bit tile.
template <int NT, class Ctx>
__host__ __device__ void products(const Ctx& x, float (&c)[NT][4], const uint32_t (&a)[4][4],
                                  const uint16_t (*tile)[kLd], int lane) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    #pragma unroll
    for (int kc = 0; kc < 4; ++kc) {
      uint32_t b[2];
      load_b(b, &tile[8 * nt][16 * kc], kLd, lane);
      x.mma(c[nt], a[kc], b);
    }
}
// acc[nd] += A . B_nd over the 64 head dims: A one 16 x 16 A fragment (16 rows of the other
// side), B_nd(k, n) = tile[8 nd + n][k] of a transposed tile (head dims as rows) from `col`.
template <int kLdT, class Ctx>
__host__ __device__ void accumulate(const Ctx& x, float (&acc)[8][4], const uint32_t (&a)[4],
                                    const uint16_t (*tile)[kLdT], int col, int lane) {
#pragma unroll
  for (int nd = 0; nd < 8; ++nd) {
    uint32_t b[2];
    load_b(b, &tile[8 * nd][col], kLdT, lane);
    x.mma(acc[nd], a, b);
  }
}

// Writes a warp's 16 x 64 float32 result (acc[nd]: columns 8 nd..) to rows row[0], row[1]
// of a [rows, kD] matrix, scaled per row; rows at or past `rows` are not written.
__host__ __device__ inline void store_rows(float* dst, const float (&acc)[8][4], const int64_t (&row)[2], int64_t rows,
                                           const float (&mul)[2], int lane) {
  const int t = lane & 3;
  #pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    if (row[hr] >= rows) continue;
    float* d = dst + row[hr] * kD;
    #pragma unroll
    for (int nd = 0; nd < 8; ++nd) {
      d[8 * nd + 2 * t] = acc[nd][2 * hr] * mul[hr];
      d[8 * nd + 2 * t + 1] = acc[nd][2 * hr + 1] * mul[hr];
    }
  }
}

// ---- forward --------------------------------------------------------------------------
// S = Q K^T per key tile in registers; masks, the running max and sum on the accumulators;
// O += P V with P's accumulators as the A operand and V's tile transposed in shared memory.
template <class Ctx>
__host__ __device__ void fwd_body(const Ctx& x, const FusedAttentionArgs& a, uint32_t thr, FwdSmem& sm) {
  const int tid = x.tid(), w = tid / 32, lane = tid % 32, t = lane & 3;
  const int64_t bh = x.by(), q0 = x.bx() * kRows;
  const int64_t row[2] = {q0 + 16 * w + (lane >> 2), q0 + 16 * w + (lane >> 2) + 8};
  const float* kb = static_cast<const float*>(a.k) + bh * a.Tk * kD;
  const float* vb = static_cast<const float*>(a.v) + bh * a.Tk * kD;
  const uint8_t* m = mask_of(a, bh);
  stage_rows(x, sm.q, static_cast<const float*>(a.q) + bh * a.Tq * kD, q0, a.Tq, kRows);
  x.sync();
  uint32_t qa[4][4];
  #pragma unroll
  for (int kc = 0; kc < 4; ++kc) load_a(qa[kc], &sm.q[16 * w][16 * kc], kLd, lane);
  float o[8][4] = {}, mx[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  Keep keep = make_keep(a, thr);
  const float scale = float(a.scale);
  for (int64_t t0 = 0; t0 < a.Tk && !(a.causal && t0 > q0 + kRows - 1); t0 += kFwdTile) {   // block-uniform
    x.sync();   // the previous tile's readers are done
    stage_rows(x, sm.k, kb, t0, a.Tk, kFwdTile);
    stage_cols<kLdF>(x, sm.vt, vb, t0, a.Tk, kFwdTile);
    x.sync();
    float s[8][4] = {};
    products(x, s, qa, sm.k, lane);
    #pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float tmax = -INFINITY;
      #pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        #pragma unroll
        for (int e = 2 * hr; e < 2 * hr + 2; ++e) {
          const float v = visible(a, m, row[hr], t0 + 8 * nt + 2 * t + (e & 1)) ? scale * s[nt][e] : -INFINITY;
          s[nt][e] = v;
          tmax = v > tmax ? v : tmax;
        }
      tmax = x.quad_max(tmax);
      const float mnew = tmax > mx[hr] ? tmax : mx[hr];
      const float f = mx[hr] == -INFINITY ? 0.0f : expf(mx[hr] - mnew);   // rescale what was summed under the old max
      l[hr] *= f;
      #pragma unroll
      for (int nd = 0; nd < 8; ++nd) o[nd][2 * hr] *= f, o[nd][2 * hr + 1] *= f;
      mx[hr] = mnew;
      #pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        #pragma unroll
        for (int e = 2 * hr; e < 2 * hr + 2; ++e) {
          const float pj = s[nt][e] == -INFINITY ? 0.0f : expf(s[nt][e] - mnew);
          l[hr] += pj;
          const int64_t j = t0 + 8 * nt + 2 * t + (e & 1);
          s[nt][e] = a.p > 0 && pj != 0.0f ? pj * keep(uint64_t((bh * a.Tq + row[hr]) * a.Tk + j)) : pj;
        }
    }
    #pragma unroll
    for (int kc = 0; kc < kFwdTile / 16; ++kc) {   // O += P V
      uint32_t pa[4];
      acc_to_a(x, pa, s[2 * kc], s[2 * kc + 1]);
      accumulate(x, o, pa, sm.vt, 16 * kc, lane);
    }
  }
  float inv[2];
  #pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const float total = x.quad_sum(l[hr]);
    const bool empty = mx[hr] == -INFINITY;
    inv[hr] = empty ? 0.0f : 1.0f / total;
    if (t == 0 && row[hr] < a.Tq)
      static_cast<float*>(a.lse)[bh * a.Tq + row[hr]] = empty ? -INFINITY : mx[hr] + logf(total);
  }
  store_rows(static_cast<float*>(a.out) + bh * a.Tq * kD, o, row, a.Tq, inv, lane);
}

// ---- backward: dQ ---------------------------------------------------------------------
// Per key tile S = Q K^T and dP = dO V^T in registers, dS = P (Z dP - Di) scale on the
// accumulators, dQ += dS K with dS as the A operand and K's tile transposed.
template <class Ctx>
__host__ __device__ void dq_body(const Ctx& x, const FusedAttentionArgs& a, uint32_t thr, DqSmem& sm) {
  const int tid = x.tid(), w = tid / 32, lane = tid % 32, t = lane & 3;
  const int64_t bh = x.by(), q0 = x.bx() * kRows;
  const int r16[2] = {16 * w + (lane >> 2), 16 * w + (lane >> 2) + 8};
  const int64_t row[2] = {q0 + r16[0], q0 + r16[1]};
  const float* kb = static_cast<const float*>(a.k) + bh * a.Tk * kD;
  const float* vb = static_cast<const float*>(a.v) + bh * a.Tk * kD;
  const uint8_t* m = mask_of(a, bh);
  stage_rows(x, sm.q, static_cast<const float*>(a.q) + bh * a.Tq * kD, q0, a.Tq, kRows);
  stage_rows(x, sm.go, static_cast<const float*>(a.dout) + bh * a.Tq * kD, q0, a.Tq, kRows);
  flash::stage_row_stats(tid, a, bh, q0, kRows, sm.lse, sm.di);
  x.sync();
  uint32_t qa[4][4], ga[4][4];
  #pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    load_a(qa[kc], &sm.q[16 * w][16 * kc], kLd, lane);
    load_a(ga[kc], &sm.go[16 * w][16 * kc], kLd, lane);
  }
  const float lse[2] = {sm.lse[r16[0]], sm.lse[r16[1]]}, di[2] = {sm.di[r16[0]], sm.di[r16[1]]};
  float dq[8][4] = {};
  Keep keep = make_keep(a, thr);
  const float scale = float(a.scale);
  for (int64_t t0 = 0; t0 < a.Tk && !(a.causal && t0 > q0 + kRows - 1); t0 += kBwdTile) {
    x.sync();
    stage_rows(x, sm.k, kb, t0, a.Tk, kBwdTile);
    stage_rows(x, sm.v, vb, t0, a.Tk, kBwdTile);
    stage_cols<kLdB>(x, sm.kt, kb, t0, a.Tk, kBwdTile);
    x.sync();
    float s[4][4] = {}, dp[4][4] = {};
    products(x, s, qa, sm.k, lane);
    products(x, dp, ga, sm.v, lane);
    #pragma unroll
    for (int hr = 0; hr < 2; ++hr)
      #pragma unroll
      for (int nt = 0; nt < 4; ++nt)
        #pragma unroll
        for (int e = 2 * hr; e < 2 * hr + 2; ++e) {
          const int64_t j = t0 + 8 * nt + 2 * t + (e & 1);
          float ds = 0.0f;
          if (visible(a, m, row[hr], j) && lse[hr] != -INFINITY) {
            const float pj = expf(scale * s[nt][e] - lse[hr]);
            const float z = a.p > 0 ? keep(uint64_t((bh * a.Tq + row[hr]) * a.Tk + j)) : 1.0f;
            ds = pj * (z * dp[nt][e] - di[hr]) * scale;
          }
          s[nt][e] = ds;
        }
    #pragma unroll
    for (int kc = 0; kc < kBwdTile / 16; ++kc) {   // dQ += dS K
      uint32_t dsa[4];
      acc_to_a(x, dsa, s[2 * kc], s[2 * kc + 1]);
      accumulate(x, dq, dsa, sm.kt, 16 * kc, lane);
    }
  }
  const float one[2] = {1.0f, 1.0f};
  store_rows(static_cast<float*>(a.dq) + bh * a.Tq * kD, dq, row, a.Tq, one, lane);
}

// ---- backward: dK, dV -----------------------------------------------------------------
// Per query tile S^T = K Q^T and dP^T = V dO^T in registers, P Z and dS on the
// accumulators, dV += (P Z)^T dO and dK += dS^T Q with the query tile and dO transposed.
template <class Ctx>
__host__ __device__ void dkv_body(const Ctx& x, const FusedAttentionArgs& a, uint32_t thr, DkvSmem& sm) {
  const int tid = x.tid(), w = tid / 32, lane = tid % 32, t = lane & 3;
  const int64_t bh = x.by(), k0 = x.bx() * kRows;
  const int64_t key[2] = {k0 + 16 * w + (lane >> 2), k0 + 16 * w + (lane >> 2) + 8};
  const float* qb = static_cast<const float*>(a.q) + bh * a.Tq * kD;
  const float* gb = static_cast<const float*>(a.dout) + bh * a.Tq * kD;
  const uint8_t* m = mask_of(a, bh);
  stage_rows(x, sm.k, static_cast<const float*>(a.k) + bh * a.Tk * kD, k0, a.Tk, kRows);
  stage_rows(x, sm.v, static_cast<const float*>(a.v) + bh * a.Tk * kD, k0, a.Tk, kRows);
  x.sync();
  uint32_t ka[4][4], va[4][4];
  #pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    load_a(ka[kc], &sm.k[16 * w][16 * kc], kLd, lane);
    load_a(va[kc], &sm.v[16 * w][16 * kc], kLd, lane);
  }
  float dk[8][4] = {}, dv[8][4] = {};
  Keep keep = make_keep(a, thr);
  const float scale = float(a.scale);
  // causal: query tiles whose last row precedes the block's first key see none of its keys
  for (int64_t t0 = a.causal ? (k0 / kBwdTile) * kBwdTile : 0; t0 < a.Tq; t0 += kBwdTile) {
    x.sync();
    stage_rows(x, sm.q, qb, t0, a.Tq, kBwdTile);
    stage_rows(x, sm.go, gb, t0, a.Tq, kBwdTile);
    stage_cols<kLdB>(x, sm.qt, qb, t0, a.Tq, kBwdTile);
    stage_cols<kLdB>(x, sm.got, gb, t0, a.Tq, kBwdTile);
    flash::stage_row_stats(tid, a, bh, t0, kBwdTile, sm.lse, sm.di);
    x.sync();
    float st[4][4] = {}, dpt[4][4] = {};
    products(x, st, ka, sm.q, lane);
    products(x, dpt, va, sm.go, lane);
    #pragma unroll
    for (int nt = 0; nt < 4; ++nt)
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * nt + 2 * t + (e & 1);
        const int64_t i = t0 + c, j = key[e >> 1];
        float pz = 0.0f, ds = 0.0f;
        if (visible(a, m, i, j) && sm.lse[c] != -INFINITY) {
          const float pj = expf(scale * st[nt][e] - sm.lse[c]);
          const float z = a.p > 0 ? keep(uint64_t((bh * a.Tq + i) * a.Tk + j)) : 1.0f;
          pz = pj * z;
          ds = pj * (z * dpt[nt][e] - sm.di[c]) * scale;
        }
        st[nt][e] = pz;
        dpt[nt][e] = ds;
      }
    #pragma unroll
    for (int kc = 0; kc < kBwdTile / 16; ++kc) {   // dV += (P Z)^T dO, dK += dS^T Q
      uint32_t pa[4], dsa[4];
      acc_to_a(x, pa, st[2 * kc], st[2 * kc + 1]);
      acc_to_a(x, dsa, dpt[2 * kc], dpt[2 * kc + 1]);
      accumulate(x, dv, pa, sm.got, 16 * kc, lane);
      accumulate(x, dk, dsa, sm.qt, 16 * kc, lane);
    }
  }
  const float one[2] = {1.0f, 1.0f};
  store_rows(static_cast<float*>(a.dk) + bh * a.Tk * kD, dk, key, a.Tk, one, lane);
  store_rows(static_cast<float*>(a.dv) + bh * a.Tk * kD, dv, key, a.Tk, one, lane);
}

}  // namespace oomlab::mma
