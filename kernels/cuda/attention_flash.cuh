// attention_flash.cuh — the bodies of the register-tiled float32 fused-attention kernels
// (attention_flash.cu, which describes the algorithm), written once for two executors: the
// GPU (DeviceCtx: threadIdx / blockIdx, __syncthreads, warp shuffles over a row group's 8
// lanes) and a host emulation of a block (kernels/cuda/check/attention_kernels_check.cu: 128
// host threads, a barrier, an exchange array), so that CPU CI runs the very index arithmetic,
// tiling and masking the GPU runs against the CPU kernels. A context provides tid(), bx(),
// by(), sync(), group_max(v), group_sum(v) (over lanes tid & ~7 .. + 7); every thread of a
// block calls sync and the group reductions the same number of times (block-uniform loops).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cuda/attention_keep.cuh"
#include "kernels/cuda/block_ctx.cuh"

namespace oomlab::flash {
using cuda::AttentionKeep;
using cuda::DeviceCtx;
constexpr int kD = 64;         // head dim of q, k and v
constexpr int kBlock = 64;     // rows a block owns (queries: forward, dQ; keys: dK / dV)
constexpr int kTile = 32;      // rows of the other side per step
constexpr int kThreads = 128;  // 16 row groups of 4 x 8 column groups
constexpr int kPad = 4;        // transposed tiles: rows of kBlock + 4 / kTile + 4 floats

struct __align__(16) FwdSmem {
  float qt[kD][kBlock + kPad];   // Q^T of the block's rows
  float kt[kD][kTile + kPad];    // K^T of the key tile
  float v[kTile][kD];            // V of the key tile
  float pt[kTile][kBlock + kPad];  // dropped probabilities, transposed
};
struct __align__(16) DqSmem {
  float qt[kD][kBlock + kPad], got[kD][kBlock + kPad];   // Q^T, dO^T of the block's rows
  float kt[kD][kTile + kPad], vt[kD][kTile + kPad];      // K^T, V^T of the key tile
  float k[kTile][kD];                                    // K of the key tile
  float dst[kTile][kBlock + kPad];                       // dS^T
  float lse[kBlock], di[kBlock];
};
struct __align__(16) DkvSmem {
  float kt[kD][kBlock + kPad], vt[kD][kBlock + kPad];    // K^T, V^T of the block's keys
  float qt[kD][kTile + kPad], got[kD][kTile + kPad];     // Q^T, dO^T of the query tile
  float q[kTile][kD], go[kTile][kD];                     // Q, dO of the query tile
  float pz[kTile][kBlock + kPad], ds[kTile][kBlock + kPad];  // P Z and dS, query-major
  float lse[kTile], di[kTile];
};

__host__ __device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__host__ __device__ __forceinline__ void unpack(float4 v, float* out) {
  out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
}
// acc[r][c] += sum over d < kD of a[d * lda + r] * b[d * ldb + c]: a 4 x 4 micro-tile of the
// product of two transposed tiles (a and b point at the tile's first row and column).
__host__ __device__ __forceinline__ void product4x4(float (&acc)[4][4], const float* a, int lda, const float* b,
                                                    int ldb) {
  for (int d = 0; d < kD; ++d) {
    float av[4], bv[4];
    unpack(ld4(a + d * lda), av);
    unpack(ld4(b + d * ldb), bv);
    #pragma unroll
    for (int r = 0; r < 4; ++r)
      #pragma unroll
      for (int c = 0; c < 4; ++c) acc[r][c] = fmaf(av[r], bv[c], acc[r][c]);
  }
}

// Rows [r0, r0 + n) of a [rows, kD] matrix: transposed into dst[kD][ld] and/or (row) plain
// into plain[n][kD]; zeros past `rows`.
__host__ __device__ inline void stage_rows(int tid, const float* src, int64_t r0, int64_t rows, int n, float* dst_t,
                                           int ld, float* plain) {
  for (int idx = tid; idx < n * kD; idx += kThreads) {
    const int r = idx / kD, c = idx % kD;
    const float x = r0 + r < rows ? src[(r0 + r) * kD + c] : 0.0f;
    if (dst_t) dst_t[c * ld + r] = x;
    if (plain) plain[r * kD + c] = x;
  }
}

// lse and Di = dO_i . O_i of rows [r0, r0 + n) into shared memory (lse -inf past Tq).
__host__ __device__ inline void stage_row_stats(int tid, const FusedAttentionArgs& a, int64_t bh, int64_t r0, int n,
                                                float* lse, float* di) {
  for (int t = tid; t < n; t += kThreads) {
    const int64_t i = r0 + t;
    float d = 0.0f, l = -INFINITY;
    if (i < a.Tq) {
      const float* o = static_cast<const float*>(a.out) + (bh * a.Tq + i) * kD;
      const float* g = static_cast<const float*>(a.dout) + (bh * a.Tq + i) * kD;
      for (int c = 0; c < kD; ++c) d = fmaf(g[c], o[c], d);
      l = static_cast<const float*>(a.lse)[bh * a.Tq + i];
    }
    lse[t] = l;
    di[t] = d;
  }
}

__host__ __device__ __forceinline__ bool masked(const FusedAttentionArgs& a, const uint8_t* m, int64_t i, int64_t j) {
  return j >= a.Tk || (m && m[j]) || (a.causal && j > i);
}

template <class Ctx>
__host__ __device__ void fwd_body(const Ctx& x, const FusedAttentionArgs& a, uint32_t thr, FwdSmem& s) {
  const int tid = x.tid(), rg = tid / 8, cg = tid % 8;
  const int64_t bh = x.by(), i0 = x.bx() * kBlock;
  const float* k = static_cast<const float*>(a.k) + bh * a.Tk * kD;
  const float* v = static_cast<const float*>(a.v) + bh * a.Tk * kD;
  const uint8_t* m = a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
  stage_rows(tid, static_cast<const float*>(a.q) + bh * a.Tq * kD, i0, a.Tq, kBlock, &s.qt[0][0], kBlock + kPad,
             nullptr);
  float acc[4][8] = {}, mx[4], l[4];
  #pragma unroll
  for (int r = 0; r < 4; ++r) mx[r] = -INFINITY, l[r] = 0.0f;
  AttentionKeep keep{a.seed, a.base, ~uint64_t(0), thr, float(1.0 / (1.0 - a.p))};
  const float scale = float(a.scale);
  for (int64_t t0 = 0; t0 < a.Tk && !(a.causal && t0 > i0 + kBlock - 1); t0 += kTile) {   // block-uniform
    x.sync();   // the previous tile's readers are done (and Q^T is staged)
    stage_rows(tid, k, t0, a.Tk, kTile, &s.kt[0][0], kTile + kPad, nullptr);
    stage_rows(tid, v, t0, a.Tk, kTile, nullptr, 0, &s.v[0][0]);
    x.sync();
    float sc[4][4] = {};
    product4x4(sc, &s.qt[0][rg * 4], kBlock + kPad, &s.kt[0][cg * 4], kTile + kPad);
    #pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t i = i0 + rg * 4 + r;
      float tmax = -INFINITY;
      #pragma unroll
      for (int c = 0; c < 4; ++c) {
        sc[r][c] = masked(a, m, i, t0 + cg * 4 + c) ? -INFINITY : scale * sc[r][c];
        tmax = fmaxf(tmax, sc[r][c]);
      }
      const float mnew = fmaxf(mx[r], x.group_max(tmax));
      const float alpha = mnew == -INFINITY ? 1.0f : expf(mx[r] - mnew);   // 0 when mx was -inf
      float rs = 0.0f;
      #pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float p = mnew == -INFINITY ? 0.0f : expf(sc[r][c] - mnew);
        rs += p;
        const float z = a.p > 0 && p != 0.0f ? keep(uint64_t((bh * a.Tq + i) * a.Tk + t0 + cg * 4 + c)) : 1.0f;
        s.pt[cg * 4 + c][rg * 4 + r] = p * z;
      }
      l[r] = l[r] * alpha + x.group_sum(rs);
      mx[r] = mnew;
      #pragma unroll
      for (int c = 0; c < 8; ++c) acc[r][c] *= alpha;
    }
    x.sync();
    for (int j = 0; j < kTile; ++j) {
      float pv[4], vv[8];
      unpack(ld4(&s.pt[j][rg * 4]), pv);
      unpack(ld4(&s.v[j][cg * 8]), vv);
      unpack(ld4(&s.v[j][cg * 8 + 4]), vv + 4);
      #pragma unroll
      for (int r = 0; r < 4; ++r)
        #pragma unroll
        for (int c = 0; c < 8; ++c) acc[r][c] = fmaf(pv[r], vv[c], acc[r][c]);
    }
  }
  #pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t i = i0 + rg * 4 + r;
    if (i >= a.Tq) continue;
    const bool empty = mx[r] == -INFINITY;
    float* o = static_cast<float*>(a.out) + (bh * a.Tq + i) * kD + cg * 8;
    #pragma unroll
    for (int c = 0; c < 8; ++c) o[c] = empty ? 0.0f : acc[r][c] / l[r];
    if (cg == 0) static_cast<float*>(a.lse)[bh * a.Tq + i] = empty ? -INFINITY : mx[r] + logf(l[r]);
  }
}

template <class Ctx>
__host__ __device__ void dq_body(const Ctx& x, const FusedAttentionArgs& a, uint32_t thr, DqSmem& s) {
  const int tid = x.tid(), rg = tid / 8, cg = tid % 8;
  const int64_t bh = x.by(), i0 = x.bx() * kBlock;
  const uint8_t* m = a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
  stage_rows(tid, static_cast<const float*>(a.q) + bh * a.Tq * kD, i0, a.Tq, kBlock, &s.qt[0][0], kBlock + kPad,
             nullptr);
  stage_rows(tid, static_cast<const float*>(a.dout) + bh * a.Tq * kD, i0, a.Tq, kBlock, &s.got[0][0], kBlock + kPad,
             nullptr);
  stage_row_stats(tid, a, bh, i0, kBlock, s.lse, s.di);
  float dq[4][8] = {};
  AttentionKeep keep{a.seed, a.base, ~uint64_t(0), thr, float(1.0 / (1.0 - a.p))};
  const float scale = float(a.scale);
  for (int64_t t0 = 0; t0 < a.Tk && !(a.causal && t0 > i0 + kBlock - 1); t0 += kTile) {   // block-uniform
    x.sync();
    const float* k = static_cast<const float*>(a.k) + bh * a.Tk * kD;
    stage_rows(tid, k, t0, a.Tk, kTile, &s.kt[0][0], kTile + kPad, &s.k[0][0]);
    stage_rows(tid, static_cast<const float*>(a.v) + bh * a.Tk * kD, t0, a.Tk, kTile, &s.vt[0][0], kTile + kPad,
               nullptr);
    x.sync();
    float sc[4][4] = {}, dp[4][4] = {};
    product4x4(sc, &s.qt[0][rg * 4], kBlock + kPad, &s.kt[0][cg * 4], kTile + kPad);    // Q K^T
    product4x4(dp, &s.got[0][rg * 4], kBlock + kPad, &s.vt[0][cg * 4], kTile + kPad);   // dO V^T
    #pragma unroll
    for (int r = 0; r < 4; ++r)
      #pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int row = rg * 4 + r;
        const int64_t i = i0 + row, j = t0 + cg * 4 + c;
        const float lse = s.lse[row];
        const bool off = lse == -INFINITY || masked(a, m, i, j);
        const float p = off ? 0.0f : expf(scale * sc[r][c] - lse);
        const float z = a.p > 0 && p != 0.0f ? keep(uint64_t((bh * a.Tq + i) * a.Tk + j)) : 1.0f;
        s.dst[cg * 4 + c][row] = p * (z * dp[r][c] - s.di[row]);
      }
    x.sync();
    for (int j = 0; j < kTile; ++j) {
      float dsv[4], kv[8];
      unpack(ld4(&s.dst[j][rg * 4]), dsv);
      unpack(ld4(&s.k[j][cg * 8]), kv);
      unpack(ld4(&s.k[j][cg * 8 + 4]), kv + 4);
      #pragma unroll
      for (int r = 0; r < 4; ++r)
        #pragma unroll
        for (int c = 0; c < 8; ++c) dq[r][c] = fmaf(dsv[r], kv[c], dq[r][c]);
    }
  }
  #pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t i = i0 + rg * 4 + r;
    if (i >= a.Tq) continue;
    float* out = static_cast<float*>(a.dq) + (bh * a.Tq + i) * kD + cg * 8;
    #pragma unroll
    for (int c = 0; c < 8; ++c) out[c] = scale * dq[r][c];
  }
}

// One query tile's P Z and dS for the block's keys, into s.pz / s.ds (query-major).
__host__ __device__ inline void dkv_scores(int tid, const FusedAttentionArgs& a, DkvSmem& s, const uint8_t* m,
                                           int64_t bh, int64_t j0, int64_t t0, AttentionKeep& keep) {
  const int kg = tid / 8, qg = tid % 8;
  float sc[4][4] = {}, dp[4][4] = {};
  product4x4(sc, &s.kt[0][kg * 4], kBlock + kPad, &s.qt[0][qg * 4], kTile + kPad);    // K Q^T
  product4x4(dp, &s.vt[0][kg * 4], kBlock + kPad, &s.got[0][qg * 4], kTile + kPad);   // V dO^T
  const float scale = float(a.scale);
  #pragma unroll
  for (int r = 0; r < 4; ++r)
    #pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int key = kg * 4 + r, row = qg * 4 + c;
      const int64_t j = j0 + key, i = t0 + row;
      const float lse = s.lse[row];
      const bool off = lse == -INFINITY || masked(a, m, i, j);
      const float p = off ? 0.0f : expf(scale * sc[r][c] - lse);
      const float z = a.p > 0 && p != 0.0f ? keep(uint64_t((bh * a.Tq + i) * a.Tk + j)) : 1.0f;
      s.pz[row][key] = p * z;
      s.ds[row][key] = p * (z * dp[r][c] - s.di[row]);
    }
}

template <class Ctx>
__host__ __device__ void dkv_body(const Ctx& x, const FusedAttentionArgs& a, uint32_t thr, DkvSmem& s) {
  const int tid = x.tid(), kg = tid / 8, dg = tid % 8;
  const int64_t bh = x.by(), j0 = x.bx() * kBlock;
  const uint8_t* m = a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
  stage_rows(tid, static_cast<const float*>(a.k) + bh * a.Tk * kD, j0, a.Tk, kBlock, &s.kt[0][0], kBlock + kPad,
             nullptr);
  stage_rows(tid, static_cast<const float*>(a.v) + bh * a.Tk * kD, j0, a.Tk, kBlock, &s.vt[0][0], kBlock + kPad,
             nullptr);
  float dk[4][8] = {}, dv[4][8] = {};
  AttentionKeep keep{a.seed, a.base, ~uint64_t(0), thr, float(1.0 / (1.0 - a.p))};
  for (int64_t t0 = 0; t0 < a.Tq; t0 += kTile) {
    if (a.causal && t0 + kTile <= j0) continue;   // block-uniform: every query row < every key
    x.sync();
    stage_rows(tid, static_cast<const float*>(a.q) + bh * a.Tq * kD, t0, a.Tq, kTile, &s.qt[0][0], kTile + kPad,
               &s.q[0][0]);
    stage_rows(tid, static_cast<const float*>(a.dout) + bh * a.Tq * kD, t0, a.Tq, kTile, &s.got[0][0], kTile + kPad,
               &s.go[0][0]);
    stage_row_stats(tid, a, bh, t0, kTile, s.lse, s.di);
    x.sync();
    dkv_scores(tid, a, s, m, bh, j0, t0, keep);
    x.sync();
    for (int i = 0; i < kTile; ++i) {
      float pzv[4], dsv[4], gv[8], qv[8];
      unpack(ld4(&s.pz[i][kg * 4]), pzv);
      unpack(ld4(&s.ds[i][kg * 4]), dsv);
      unpack(ld4(&s.go[i][dg * 8]), gv);
      unpack(ld4(&s.go[i][dg * 8 + 4]), gv + 4);
      unpack(ld4(&s.q[i][dg * 8]), qv);
      unpack(ld4(&s.q[i][dg * 8 + 4]), qv + 4);
      #pragma unroll
      for (int r = 0; r < 4; ++r)
        #pragma unroll
        for (int c = 0; c < 8; ++c) {
          dv[r][c] = fmaf(pzv[r], gv[c], dv[r][c]);
          dk[r][c] = fmaf(dsv[r], qv[c], dk[r][c]);
        }
    }
  }
  const float scale = float(a.scale);
  #pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t j = j0 + kg * 4 + r;
    if (j >= a.Tk) continue;
    float* gk = static_cast<float*>(a.dk) + (bh * a.Tk + j) * kD + dg * 8;
    float* gv = static_cast<float*>(a.dv) + (bh * a.Tk + j) * kD + dg * 8;
    #pragma unroll
    for (int c = 0; c < 8; ++c) {
      gk[c] = scale * dk[r][c];
      gv[c] = dv[r][c];
    }
  }
}

}  // namespace oomlab::flash
