// attention_tiled.cu — shared-memory tiled CUDA kernels of float32 fused attention
// (kernels/attention.h), behind the tiled-attention switch (cuda_settings.h; default off
// until a GPU run of the kit shows them correct and faster than kernels/cuda/attention.cu).
// FlashAttention's scheme on CUDA cores (no tensor cores yet), float32 arithmetic:
//  * forward: a block of kRows threads per (slice bh, 64 query rows), one thread per row;
//    key/value tiles of kCols rows staged in shared memory; online softmax (running max m,
//    sum l of the undropped exps, output accumulator of the dropped ones), then out = acc / l,
//    lse = m + log(l). A row whose every key is padded: zeros, lse -inf.
//  * backward, two kernels: dQ as the forward (thread per query row; Di = dO_i . O_i;
//    dS = P (Z dP - Di)); dK / dV with a thread per key row over query tiles staged in
//    shared memory (q, dO, lse, Di).
// Dropout: the factor of element e = (bh * Tq + i) * Tk + j is philox_block(seed, base + e/4)
// word e % 4, >= threshold, as every other dropout kernel. Each output element is written by
// one thread in a fixed order: deterministic. Head dims up to kMaxDim (larger ones fall back).
// Causal (key j > query i masked, top-left aligned as the CPU): masked as a padded key, and
// the tiles a whole block would mask are skipped (key tiles after its last query row; query
// tiles before its first key row).
#include <cmath>

#include "kernels/attention.h"
#include "kernels/cuda/attention_keep.cuh"
#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/launch_utils.cuh"

namespace oomlab {
namespace {
using namespace cuda;
constexpr int kRows = 64;     // threads (query or key rows) per block
constexpr int kCols = 32;     // rows per shared-memory tile
constexpr int kMaxDim = 128;  // head dims D, Dv

using Keep = AttentionKeep;   // dropout factors of consecutive elements, one Philox block per 4

__device__ __forceinline__ float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma unroll 16
  for (int c = 0; c < n; ++c) s = fmaf(a[c], b[c], s);
  return s;
}

// Rows [t0, t0 + kCols) of a [rows, n] matrix into shared memory (zeros past `rows`).
__device__ void stage(float (*dst)[kMaxDim], const float* src, int64_t t0, int64_t rows, int n) {
  for (int idx = threadIdx.x; idx < kCols * n; idx += blockDim.x) {
    const int r = idx / n, c = idx % n;
    dst[r][c] = t0 + r < rows ? src[(t0 + r) * n + c] : 0.0f;
  }
}

template <int kDim> __global__ void tiled_fwd(FusedAttentionArgs a, uint32_t thr) {
  __shared__ float ks[kCols][kMaxDim], vs[kCols][kMaxDim];
  const int64_t bh = blockIdx.y, i = int64_t(blockIdx.x) * kRows + threadIdx.x;
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
  const int64_t last_row = int64_t(blockIdx.x) * kRows + kRows - 1;
  for (int64_t t0 = 0; t0 < a.Tk && !(a.causal && t0 > last_row); t0 += kCols) {   // block-uniform
    stage(ks, kb, t0, a.Tk, D);
    stage(vs, vb, t0, a.Tk, Dv);
    __syncthreads();
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
    __syncthreads();
  }
  if (!row) return;
  float* o = static_cast<float*>(a.out) + r * Dv;
  const bool empty = mx == -INFINITY;
  for (int c = 0; c < Dv; ++c) o[c] = empty ? 0.0f : acc[c] / l;
  static_cast<float*>(a.lse)[r] = empty ? -INFINITY : mx + logf(l);
}

template <int kDim> __global__ void tiled_bwd_dq(FusedAttentionArgs a, uint32_t thr) {
  __shared__ float ks[kCols][kMaxDim], vs[kCols][kMaxDim];
  const int64_t bh = blockIdx.y, i = int64_t(blockIdx.x) * kRows + threadIdx.x;
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
  const int64_t last_row = int64_t(blockIdx.x) * kRows + kRows - 1;
  for (int64_t t0 = 0; t0 < a.Tk && !(a.causal && t0 > last_row); t0 += kCols) {   // block-uniform
    stage(ks, static_cast<const float*>(a.k) + bh * a.Tk * D, t0, a.Tk, D);
    stage(vs, static_cast<const float*>(a.v) + bh * a.Tk * Dv, t0, a.Tk, Dv);
    __syncthreads();
    const int n = int(a.Tk - t0 < kCols ? a.Tk - t0 : kCols);
    for (int jj = 0; live && jj < n; ++jj) {
      const int64_t j = t0 + jj;
      if ((m && m[j]) || (a.causal && j > i)) continue;
      const float p = expf(float(a.scale) * dot(q, ks[jj], D) - lse);
      const float z = a.p > 0 ? keep(uint64_t(r * a.Tk + j)) : 1.0f;
      const float ds = float(a.scale) * p * (z * dot(go, vs[jj], Dv) - di);
      for (int c = 0; c < D; ++c) dq[c] = fmaf(ds, ks[jj][c], dq[c]);
    }
    __syncthreads();
  }
  if (row)
    for (int c = 0; c < D; ++c) static_cast<float*>(a.dq)[r * D + c] = dq[c];
}

template <int kDim> __global__ void tiled_bwd_dkv(FusedAttentionArgs a, uint32_t thr) {
  __shared__ float qs[kCols][kMaxDim], gos[kCols][kMaxDim];
  __shared__ float lses[kCols], dis[kCols];
  const int64_t bh = blockIdx.y, j = int64_t(blockIdx.x) * kRows + threadIdx.x;
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
  const int64_t first_key = int64_t(blockIdx.x) * kRows;
  for (int64_t t0 = 0; t0 < a.Tq; t0 += kCols) {
    if (a.causal && t0 + kCols <= first_key) continue;   // block-uniform: every query row < every key
    stage(qs, qb, t0, a.Tq, D);
    stage(gos, gob, t0, a.Tq, Dv);
    if (threadIdx.x < kCols) {   // each staged row's lse and Di = dO_i . O_i
      const int64_t i = t0 + threadIdx.x;
      float di = 0.0f, l = -INFINITY;
      if (i < a.Tq) {
        const float* o = static_cast<const float*>(a.out) + (bh * a.Tq + i) * Dv;
        for (int c = 0; c < Dv; ++c) di = fmaf(gob[i * Dv + c], o[c], di);
        l = static_cast<const float*>(a.lse)[bh * a.Tq + i];
      }
      lses[threadIdx.x] = l;
      dis[threadIdx.x] = di;
    }
    __syncthreads();
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
    __syncthreads();
  }
  if (j >= a.Tk) return;
  for (int c = 0; c < D; ++c) static_cast<float*>(a.dk)[(bh * a.Tk + j) * D + c] = dk[c];
  for (int c = 0; c < Dv; ++c) static_cast<float*>(a.dv)[(bh * a.Tk + j) * Dv + c] = dv[c];
}

uint32_t threshold(double p) { return uint32_t(std::ceil(p * 16777216.0)); }   // as the dropout kernels
dim3 grid(int64_t rows, int64_t slices) { return dim3(unsigned((rows + kRows - 1) / kRows), unsigned(slices)); }

// Head dims of 64 (BERT's) at compile time, so the per-row arrays live in registers; other
// dims up to kMaxDim at run time.
template <int kDim> void forward(const FusedAttentionArgs& a, cudaStream_t stream) {
  tiled_fwd<kDim><<<grid(a.Tq, a.BH), kRows, 0, stream>>>(a, threshold(a.p));
  CUDA_LAUNCH_CHECK();
}
template <int kDim> void backward(const FusedAttentionArgs& a, cudaStream_t stream) {
  if (a.BH * a.Tq > 0) {
    tiled_bwd_dq<kDim><<<grid(a.Tq, a.BH), kRows, 0, stream>>>(a, threshold(a.p));
    CUDA_LAUNCH_CHECK();
  }
  if (a.BH * a.Tk > 0) {
    tiled_bwd_dkv<kDim><<<grid(a.Tk, a.BH), kRows, 0, stream>>>(a, threshold(a.p));
    CUDA_LAUNCH_CHECK();
  }
}
bool dims64(const FusedAttentionArgs& a) { return a.D == 64 && a.Dv == 64; }

}  // namespace

bool tiled_attention_fits(const FusedAttentionArgs& a) {
  return a.D <= kMaxDim && a.Dv <= kMaxDim && a.BH <= 65535;
}

void tiled_attention_forward(const FusedAttentionArgs& a, cudaStream_t stream) {
  if (a.BH * a.Tq == 0) return;
  dims64(a) ? forward<64>(a, stream) : forward<0>(a, stream);
}

void tiled_attention_backward(const FusedAttentionArgs& a, cudaStream_t stream) {
  dims64(a) ? backward<64>(a, stream) : backward<0>(a, stream);
}

}  // namespace oomlab
