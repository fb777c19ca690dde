// attention_tiled.cu — shared-memory tiled CUDA kernels of float32 fused attention
// (kernels/attention.h), behind the tiled-attention switch (cuda_settings.h; on by default
// since the H200 measured them against kernels/cuda/attention.cu). The kernel bodies live in
// attention_tiled.cuh (written for an executor context, so CPU CI runs them on emulated
// thread blocks: kernels/cuda/check/attention_kernels_check.cu); this file holds the entry points.
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
#include "kernels/cuda/attention_tiled.cuh"
#include "kernels/cuda/attention_tiled.h"
#include "kernels/cuda/launch_utils.cuh"

namespace oomlab {
namespace {
using namespace tiled;
using cuda::DeviceCtx;

template <int kDim> __global__ void tiled_fwd(FusedAttentionArgs a, uint32_t thr) {
  __shared__ TileSmem s;
  fwd_body<kDim>(DeviceCtx{}, a, thr, s);
}
template <int kDim> __global__ void tiled_bwd_dq(FusedAttentionArgs a, uint32_t thr) {
  __shared__ TileSmem s;
  dq_body<kDim>(DeviceCtx{}, a, thr, s);
}
template <int kDim> __global__ void tiled_bwd_dkv(FusedAttentionArgs a, uint32_t thr) {
  __shared__ DkvTileSmem s;
  dkv_body<kDim>(DeviceCtx{}, a, thr, s);
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
