// attention_tiled.cuh — the bodies of the shared-memory tiled float32 fused-attention kernels
// (attention_tiled.cu, which describes the algorithm), written for an executor context as
// attention_flash.cuh's (block_ctx.cuh: the GPU; kernels/cuda/check/attention_kernels_check.cu:
// an emulated thread block on the host, so CPU CI runs them against the CPU kernels). A block
// has kRows threads; every thread calls sync the same number of times (block-uniform loops).
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cuda/attention_keep.cuh"
#include "kernels/cuda/block_ctx.cuh"

namespace oomlab::tiled {
constexpr int kRows = 64;     // threads (query or key rows) per block
constexpr int kCols = 32;     // rows per shared-memory tile
constexpr int kMaxDim = 128;  // head dims D, Dv

using Keep = cuda::AttentionKeep;
struct TileSmem {   // forward and dQ: a key tile and a value tile
  float a[kCols][kMaxDim], b[kCols][kMaxDim];
};
struct DkvTileSmem {   // dK / dV: a query tile, its dO, lse and Di
  float qs[kCols][kMaxDim], gos[kCols][kMaxDim];
  float lses[kCols], dis[kCols];
};
   // dropout factors of consecutive elements, one Philox block per 4

__host__ __device__ __forceinline__ float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma unroll 16
  for (int c = 0; c < n; ++c) s = fmaf(a[c], b[c], s);
  return s;
}

// Rows [t0, t0 + kCols) of a [rows, n] matrix into shared memory (zeros past `rows`).
__host__ __device__ inline void stage(int tid, float (*dst)[kMaxDim], const float* src, int64_t t0, int64_t rows,
                                      int n) {
  for (int idx = tid; idx < kCols * n; idx += kRows) {
    const int r = idx / n, c = idx % n;
    dst[r][c] = t0 + r < rows ? src[(t0 + r) * n + c] : 0.0f;
  }
}

template <int kDim, class Ctx>
__host__ __device__ void fwd_body(const Ctx& x, const FusedAttentionArgs& a, uint32_t thr, TileSmem& sm) {
  auto& ks = sm.a;
  auto& vs = sm.b;
  const int tid = x.tid();
  const int64_t bh = x.by(), i = x.bx() * kRows + tid;
  const bool row = i < a.Tq;
  const int D = kDim ? kDim : int(a.D), Dv = kDim ? kDim : int(a.Dv);   // kDim: both, at compile time
  const float* kb = static_cast<const float*>(a.k) + bh * a.Tk * D;
  const float* vb = static_cast<const float*>(a.v) + bh * a.Tk * Dv;
  const uint8_t* m = a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
  float q[kDim ? kDim : kMaxDim], acc[kDim ? kDim : kMaxDim];
  const int64_t r = bh * a.Tq + i;
  for (int c = 0; c < D; ++c) q[c] = row ? static_cast<const float*>(a.q)[r * D + c] : 0.0f;
  for (int c = 0; c < Dv; ++c) acc[c] = 0.0f;
  float mx = -INFINITY, l = 0.0f;
  Keep keep{a.seed, a.base, ~uint64_t(0), thr, float(1.0 / (1.0 - a.p))};
  const int64_t last_row = x.bx() * kRows + kRows - 1;
  for (int64_t t0 = 0; t0 < a.Tk && !(a.causal && t0 > last_row); t0 += kCols) {   // block-uniform
    stage(tid, ks, kb, t0, a.Tk, D);
    stage(tid, vs, vb, t0, a.Tk, Dv);
    x.sync();
    const int n = int(a.Tk - t0 < kCols ? a.Tk - t0 : kCols);
    for (int jj = 0; row && jj < n; ++jj) {
      const int64_t j = t0 + jj;
      if ((m && m[j]) || (a.causal && j > i)) continue;
      const float s = float(a.scale) * dot(q, ks[jj], D);
      if (s > mx) {   // rescale what was summed under the old max
        const float f = mx == -INFINITY ? 0.0f : expf(mx - s);
        l *= f;
        for (int c = 0; c < Dv; ++c) acc[c] *= f;
        mx = s;
      }
      const float pj = expf(s - mx);
      l += pj;
      const float pz = a.p > 0 ? pj * keep(uint64_t(r * a.Tk + j)) : pj;
      if (pz != 0.0f)
        for (int c = 0; c < Dv; ++c) acc[c] = fmaf(pz, vs[jj][c], acc[c]);
    }
    x.sync();
  }
  if (!row) return;
  float* o = static_cast<float*>(a.out) + r * Dv;
  const bool empty = mx == -INFINITY;
  for (int c = 0; c < Dv; ++c) o[c] = empty ? 0.0f : acc[c] / l;
  static_cast<float*>(a.lse)[r] = empty ? -INFINITY : mx + logf(l);
}

template <int kDim, class Ctx>
__host__ __device__ void dq_body(const Ctx& x, const FusedAttentionArgs& a, uint32_t thr, TileSmem& sm) {
  auto& ks = sm.a;
  auto& vs = sm.b;
  const int tid = x.tid();
  const int64_t bh = x.by(), i = x.bx() * kRows + tid;
  const bool row = i < a.Tq;
  const int D = kDim ? kDim : int(a.D), Dv = kDim ? kDim : int(a.Dv);   // kDim: both, at compile time
  const int64_t r = bh * a.Tq + i;
  const uint8_t* m = a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
  float q[kDim ? kDim : kMaxDim], go[kDim ? kDim : kMaxDim], dq[kDim ? kDim : kMaxDim];
  float di = 0.0f, lse = -INFINITY;
  if (row) {
    const float* o = static_cast<const float*>(a.out) + r * Dv;
    for (int c = 0; c < Dv; ++c) {
      go[c] = static_cast<const float*>(a.dout)[r * Dv + c];
      di = fmaf(go[c], o[c], di);
    }
    for (int c = 0; c < D; ++c) q[c] = static_cast<const float*>(a.q)[r * D + c];
    lse = static_cast<const float*>(a.lse)[r];
  }
  for (int c = 0; c < D; ++c) dq[c] = 0.0f;
  Keep keep{a.seed, a.base, ~uint64_t(0), thr, float(1.0 / (1.0 - a.p))};
  const bool live = row && lse != -INFINITY;
  const int64_t last_row = x.bx() * kRows + kRows - 1;
  for (int64_t t0 = 0; t0 < a.Tk && !(a.causal && t0 > last_row); t0 += kCols) {   // block-uniform
    stage(tid, ks, static_cast<const float*>(a.k) + bh * a.Tk * D, t0, a.Tk, D);
    stage(tid, vs, static_cast<const float*>(a.v) + bh * a.Tk * Dv, t0, a.Tk, Dv);
    x.sync();
    const int n = int(a.Tk - t0 < kCols ? a.Tk - t0 : kCols);
    for (int jj = 0; live && jj < n; ++jj) {
      const int64_t j = t0 + jj;
      if ((m && m[j]) || (a.causal && j > i)) continue;
      const float p = expf(float(a.scale) * dot(q, ks[jj], D) - lse);
      const float z = a.p > 0 ? keep(uint64_t(r * a.Tk + j)) : 1.0f;
      const float ds = float(a.scale) * p * (z * dot(go, vs[jj], Dv) - di);
      for (int c = 0; c < D; ++c) dq[c] = fmaf(ds, ks[jj][c], dq[c]);
    }
    x.sync();
  }
  if (row)
    for (int c = 0; c < D; ++c) static_cast<float*>(a.dq)[r * D + c] = dq[c];
}

template <int kDim, class Ctx>
__host__ __device__ void dkv_body(const Ctx& x, const FusedAttentionArgs& a, uint32_t thr, DkvTileSmem& sm) {
  auto& qs = sm.qs;
  auto& gos = sm.gos;
  auto& lses = sm.lses;
  auto& dis = sm.dis;
  const int tid = x.tid();
  const int64_t bh = x.by(), j = x.bx() * kRows + tid;
  const bool key = j < a.Tk && !(a.mask && a.mask[(bh / a.heads) * a.Tk + j]);
  const int D = kDim ? kDim : int(a.D), Dv = kDim ? kDim : int(a.Dv);   // kDim: both, at compile time
  constexpr int kN = kDim ? kDim : kMaxDim;
  float k[kN], v[kN], dk[kN], dv[kN];
  for (int c = 0; c < D; ++c) {
    k[c] = j < a.Tk ? static_cast<const float*>(a.k)[(bh * a.Tk + j) * D + c] : 0.0f;
    dk[c] = 0.0f;
  }
  for (int c = 0; c < Dv; ++c) {
    v[c] = j < a.Tk ? static_cast<const float*>(a.v)[(bh * a.Tk + j) * Dv + c] : 0.0f;
    dv[c] = 0.0f;
  }
  Keep keep{a.seed, a.base, ~uint64_t(0), thr, float(1.0 / (1.0 - a.p))};   // rows apart: no block shared
  const float* qb = static_cast<const float*>(a.q) + bh * a.Tq * D;
  const float* gob = static_cast<const float*>(a.dout) + bh * a.Tq * Dv;
  const int64_t first_key = x.bx() * kRows;
  for (int64_t t0 = 0; t0 < a.Tq; t0 += kCols) {
    if (a.causal && t0 + kCols <= first_key) continue;   // block-uniform: every query row < every key
    stage(tid, qs, qb, t0, a.Tq, D);
    stage(tid, gos, gob, t0, a.Tq, Dv);
    if (tid < kCols) {   // each staged row's lse and Di = dO_i . O_i
      const int64_t i = t0 + tid;
      float di = 0.0f, l = -INFINITY;
      if (i < a.Tq) {
        const float* o = static_cast<const float*>(a.out) + (bh * a.Tq + i) * Dv;
        for (int c = 0; c < Dv; ++c) di = fmaf(gob[i * Dv + c], o[c], di);
        l = static_cast<const float*>(a.lse)[bh * a.Tq + i];
      }
      lses[tid] = l;
      dis[tid] = di;
    }
    x.sync();
    const int n = int(a.Tq - t0 < kCols ? a.Tq - t0 : kCols);
    for (int ii = 0; key && ii < n; ++ii) {
      if (lses[ii] == -INFINITY || (a.causal && t0 + ii < j)) continue;
      const int64_t e = (bh * a.Tq + t0 + ii) * a.Tk + j;
      const float p = expf(float(a.scale) * dot(qs[ii], k, D) - lses[ii]);
      const float z = a.p > 0 ? keep(uint64_t(e)) : 1.0f;
      const float ds = float(a.scale) * p * (z * dot(gos[ii], v, Dv) - dis[ii]);
      for (int c = 0; c < Dv; ++c) dv[c] = fmaf(p * z, gos[ii][c], dv[c]);
      for (int c = 0; c < D; ++c) dk[c] = fmaf(ds, qs[ii][c], dk[c]);
    }
    x.sync();
  }
  if (j >= a.Tk) return;
  for (int c = 0; c < D; ++c) static_cast<float*>(a.dk)[(bh * a.Tk + j) * D + c] = dk[c];
  for (int c = 0; c < Dv; ++c) static_cast<float*>(a.dv)[(bh * a.Tk + j) * Dv + c] = dv[c];
}

}  // namespace oomlab::tiled
