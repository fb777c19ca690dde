// attention.cu — CUDA kernels of fused attention (kernels/attention.h), float32 and float64
// (16-bit inputs are computed in float32 by the op). A correctness-first port of the CPU
// kernels (kernels/cpu/attention_cpu.cpp) -- float32 goes to attention_tiled.cu's kernels
// instead while the tiled-attention switch is on (cuda_settings.h; the default since the H200
// measured them) -- the same arithmetic in double, the same dropout draws (philox_block(seed, base + e / 4)),
// so the GPU kit's parity test compares them to the CPU within float rounding. Forward: one
// thread per query row, the scores recomputed in three passes (max, sum, output) instead of a
// scratch row. Backward: one thread per query row writes dq; one thread per key row writes
// dk and dv, recomputing each query row's Di = dO_i . O_i. Each output element is written by
// one thread in a fixed order: deterministic. Head dims D, Dv up to kMaxHeadDim. A causal
// call masks key j > query i as a padded key (the CPU's rule, top-left aligned).
#include <cmath>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/cuda/attention_flash.h"
#include "kernels/cuda/attention_mma.h"
#include "kernels/cuda/attention_tc.h"
#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/launch_utils.cuh"

namespace oomlab {
namespace {
using namespace cuda;
constexpr int kMaxHeadDim = 256;

__device__ __forceinline__ double keep_factor(double p, uint32_t thr, uint64_t seed, uint64_t base, uint64_t e) {
  if (p <= 0) return 1.0;
  const U4 w = philox_block(seed, base + e / 4);
  return (w.w[e % 4] >> 8) >= thr ? 1.0 / (1.0 - p) : 0.0;
}

template <class T> __device__ double score(const FusedAttentionArgs& a, int64_t bh, int64_t i, int64_t j) {
  const uint8_t* m = a.mask ? a.mask + (bh / a.heads) * a.Tk : nullptr;
  if ((m && m[j]) || (a.causal && j > i)) return -INFINITY;   // padded key, or a later one (causal)
  const T* q = static_cast<const T*>(a.q) + (bh * a.Tq + i) * a.D;
  const T* k = static_cast<const T*>(a.k) + (bh * a.Tk + j) * a.D;
  double dot = 0;
  for (int64_t c = 0; c < a.D; ++c) dot += double(q[c]) * double(k[c]);
  return a.scale * dot;
}

template <class T> __global__ void fwd_kernel(FusedAttentionArgs a, uint32_t thr) {
  for (int64_t r = gtid(); r < a.BH * a.Tq; r += gstride()) {
    const int64_t bh = r / a.Tq, i = r % a.Tq;
    double mx = -INFINITY, sum = 0, acc[kMaxHeadDim];
    for (int64_t j = 0; j < a.Tk; ++j) mx = fmax(mx, score<T>(a, bh, i, j));
    T* o = static_cast<T*>(a.out) + r * a.Dv;
    if (isinf(mx)) {
      for (int64_t c = 0; c < a.Dv; ++c) o[c] = T(0);
      static_cast<T*>(a.lse)[r] = T(-INFINITY);
      continue;
    }
    for (int64_t j = 0; j < a.Tk; ++j) sum += exp(score<T>(a, bh, i, j) - mx);
    const double l = mx + log(sum);
    for (int64_t c = 0; c < a.Dv; ++c) acc[c] = 0;
    const T* v = static_cast<const T*>(a.v) + bh * a.Tk * a.Dv;
    for (int64_t j = 0; j < a.Tk; ++j) {
      const double pj = exp(score<T>(a, bh, i, j) - l) * keep_factor(a.p, thr, a.seed, a.base, uint64_t(r * a.Tk + j));
      if (pj == 0) continue;
      for (int64_t c = 0; c < a.Dv; ++c) acc[c] += pj * double(v[j * a.Dv + c]);
    }
    for (int64_t c = 0; c < a.Dv; ++c) o[c] = T(acc[c]);
    static_cast<T*>(a.lse)[r] = T(l);
  }
}

// Di = dO_i . O_i of row r.
template <class T> __device__ double row_di(const FusedAttentionArgs& a, int64_t r) {
  const T* go = static_cast<const T*>(a.dout) + r * a.Dv;
  const T* o = static_cast<const T*>(a.out) + r * a.Dv;
  double di = 0;
  for (int64_t c = 0; c < a.Dv; ++c) di += double(go[c]) * double(o[c]);
  return di;
}

// dS_ij / scale for row r = (bh, i) and key j (0 when padded or the row is all padding).
template <class T> __device__ double dscore(const FusedAttentionArgs& a, uint32_t thr, int64_t bh, int64_t i, int64_t j,
                                            double di, double& pz) {
  const int64_t r = bh * a.Tq + i;
  const double l = double(static_cast<const T*>(a.lse)[r]);
  pz = 0;
  if (isinf(l)) return 0;
  const double p = exp(score<T>(a, bh, i, j) - l);
  if (p == 0) return 0;
  const double z = keep_factor(a.p, thr, a.seed, a.base, uint64_t(r * a.Tk + j));
  const T* go = static_cast<const T*>(a.dout) + r * a.Dv;
  const T* v = static_cast<const T*>(a.v) + (bh * a.Tk + j) * a.Dv;
  double dp = 0;
  for (int64_t c = 0; c < a.Dv; ++c) dp += double(go[c]) * double(v[c]);
  pz = p * z;
  return p * (z * dp - di);
}

template <class T> __global__ void bwd_dq_kernel(FusedAttentionArgs a, uint32_t thr) {
  for (int64_t r = gtid(); r < a.BH * a.Tq; r += gstride()) {
    const int64_t bh = r / a.Tq, i = r % a.Tq;
    const double di = row_di<T>(a, r);
    double dq[kMaxHeadDim];
    for (int64_t c = 0; c < a.D; ++c) dq[c] = 0;
    for (int64_t j = 0; j < a.Tk; ++j) {
      double pz;
      const double ds = a.scale * dscore<T>(a, thr, bh, i, j, di, pz);
      const T* k = static_cast<const T*>(a.k) + (bh * a.Tk + j) * a.D;
      for (int64_t c = 0; c < a.D; ++c) dq[c] += ds * double(k[c]);
    }
    T* out = static_cast<T*>(a.dq) + r * a.D;
    for (int64_t c = 0; c < a.D; ++c) out[c] = T(dq[c]);
  }
}

template <class T> __global__ void bwd_dkv_kernel(FusedAttentionArgs a, uint32_t thr) {
  for (int64_t kr = gtid(); kr < a.BH * a.Tk; kr += gstride()) {
    const int64_t bh = kr / a.Tk, j = kr % a.Tk;
    double dk[kMaxHeadDim], dv[kMaxHeadDim];
    for (int64_t c = 0; c < a.D; ++c) dk[c] = 0;
    for (int64_t c = 0; c < a.Dv; ++c) dv[c] = 0;
    for (int64_t i = 0; i < a.Tq; ++i) {
      const int64_t r = bh * a.Tq + i;
      double pz;
      const double ds = a.scale * dscore<T>(a, thr, bh, i, j, row_di<T>(a, r), pz);
      const T* q = static_cast<const T*>(a.q) + r * a.D;
      const T* go = static_cast<const T*>(a.dout) + r * a.Dv;
      for (int64_t c = 0; c < a.D; ++c) dk[c] += ds * double(q[c]);
      for (int64_t c = 0; c < a.Dv; ++c) dv[c] += pz * double(go[c]);
    }
    T* gk = static_cast<T*>(a.dk) + kr * a.D;
    T* gv = static_cast<T*>(a.dv) + kr * a.Dv;
    for (int64_t c = 0; c < a.D; ++c) gk[c] = T(dk[c]);
    for (int64_t c = 0; c < a.Dv; ++c) gv[c] = T(dv[c]);
  }
}

void check_dims(const FusedAttentionArgs& a) {
  OOMLAB_CHECK_T(NotImplementedError, a.D <= kMaxHeadDim && a.Dv <= kMaxHeadDim, "fused attention on cuda: head dims ",
                 a.D, " / ", a.Dv, " exceed ", kMaxHeadDim);
}
uint32_t threshold(double p) { return uint32_t(std::ceil(p * 16777216.0)); }   // as the dropout kernels

// float32 under the tiled-attention switch (cuda_settings.h): attention_tiled.cu.
template <class T> bool tiled(const FusedAttentionArgs& a) {
  return std::is_same_v<T, float> && cuda_tiled_attention() && tiled_attention_fits(a);
}

// float32 with head dims of 64 under the flash-attention switch: attention_flash.cu.
template <class T> bool flash(const FusedAttentionArgs& a) {
  return std::is_same_v<T, float> && cuda_flash_attention() && flash_attention_fits(a);
}

// float32 buffers TF32 may round, head dims of 64, under the tensor-core switch: attention_tc.cu.
template <class T> bool tensor_cores(const FusedAttentionArgs& a) {
  return std::is_same_v<T, float> && tc_attention_applies(a);
}

// float32 copies of 16-bit inputs, head dims of 64, under the 16-bit mma switch: attention_mma.cu.
template <class T> bool mma16(const FusedAttentionArgs& a) {
  return std::is_same_v<T, float> && mma_attention_applies(a);
}

template <class T> void fused_attention_forward_cuda(const FusedAttentionArgs& a) {
  if (mma16<T>(a)) return mma_attention_forward(a, Launch("fused_attention").stream);
  if (tensor_cores<T>(a)) return tc_attention_forward(a, Launch("fused_attention").stream);
  if (flash<T>(a)) return flash_attention_forward(a, Launch("fused_attention").stream);
  if (tiled<T>(a)) return tiled_attention_forward(a, Launch("fused_attention").stream);
  check_dims(a);
  if (a.BH * a.Tq == 0) return;
  const Launch L("fused_attention");
  fwd_kernel<T><<<grid_for(a.BH * a.Tq), kThreads, 0, L.stream>>>(a, threshold(a.p));
  CUDA_LAUNCH_CHECK();
}
template <class T> void fused_attention_backward_cuda(const FusedAttentionArgs& a) {
  if (mma16<T>(a)) return mma_attention_backward(a, Launch("fused_attention_backward").stream);
  if (tensor_cores<T>(a)) return tc_attention_backward(a, Launch("fused_attention_backward").stream);
  if (flash<T>(a)) return flash_attention_backward(a, Launch("fused_attention_backward").stream);
  if (tiled<T>(a)) return tiled_attention_backward(a, Launch("fused_attention_backward").stream);
  check_dims(a);
  const Launch L("fused_attention_backward");
  if (a.BH * a.Tq > 0) {
    bwd_dq_kernel<T><<<grid_for(a.BH * a.Tq), kThreads, 0, L.stream>>>(a, threshold(a.p));
    CUDA_LAUNCH_CHECK();
  }
  if (a.BH * a.Tk > 0) {
    bwd_dkv_kernel<T><<<grid_for(a.BH * a.Tk), kThreads, 0, L.stream>>>(a, threshold(a.p));
    CUDA_LAUNCH_CHECK();
  }
}
}  // namespace

void register_attention_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_CUDA(fused_attention_forward_kernels(), fused_attention_forward_cuda);
  OOMLAB_REGISTER_FLOAT_CUDA(fused_attention_backward_kernels(), fused_attention_backward_cuda);
}

}  // namespace oomlab
