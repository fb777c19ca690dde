// attention_flash.cu — register-tiled float32 fused attention (FlashAttention-2's loop order,
// Dao 2023) for head dims D = Dv = 64 (BERT-base, GPT-2, ViT-B), behind the flash-attention
// switch (cuda_settings.h, OOMLAB_CUDA_FLASH_ATTENTION=1; default off until the GPU kit shows
// it correct and faster than attention_tiled.cu, which also serves every other head dim).
// attention_tiled.cu gives each thread one query row and reads shared memory once per
// multiply-add; here a block of 128 threads computes each score tile as a small matrix
// product, every thread a 4 x 4 micro-tile (8 shared-memory loads per 16 multiply-adds), and
// every thread 4 rows x 8 columns of the output tile. CUDA cores, float32 arithmetic.
//  * forward: a block per (slice bh, 64 query rows); key/value tiles of 32 rows; online
//    softmax per row (max m, sum l of the undropped exps, reduced over the row's 8 threads
//    with warp shuffles), the dropped probabilities through shared memory into out = acc / l;
//    lse = m + log(l). A row whose every key is masked: zeros, lse -inf.
//  * backward, deterministic (each output element written by one thread, no atomics): dQ per
//    (bh, 64 query rows) over key tiles of 32; dK and dV per (bh, 64 key rows) over query
//    tiles of 32; both recompute P = exp(scale q.k - lse) and dS = P (Z dP - Di), Di = dO_i . O_i.
// Masks as attention_tiled.cu: padded keys, causal (key j > query i), and whole tiles a causal
// block would mask are skipped. Dropout: attention_keep.cuh on element (bh * Tq + i) * Tk + j,
// the same draws as every other attention kernel.
// The kernel bodies live in attention_flash.cuh, written for an executor context, so that CPU
// CI runs them on emulated thread blocks against the CPU kernels
// (kernels/cuda/check/attention_kernels_check.cu); this file holds the GPU's entry points.
#include <cmath>

#include "kernels/attention.h"
#include "kernels/cuda/attention_flash.cuh"
#include "kernels/cuda/attention_flash.h"
#include "kernels/cuda/cuda_check.h"

namespace oomlab {
namespace {
using namespace flash;

__global__ void __launch_bounds__(kThreads) flash_fwd(FusedAttentionArgs a, uint32_t thr) {
  __shared__ FwdSmem s;
  fwd_body(DeviceCtx{}, a, thr, s);
}
__global__ void __launch_bounds__(kThreads) flash_bwd_dq(FusedAttentionArgs a, uint32_t thr) {
  extern __shared__ float4 dq_raw[];
  dq_body(DeviceCtx{}, a, thr, *reinterpret_cast<DqSmem*>(dq_raw));
}
__global__ void __launch_bounds__(kThreads) flash_bwd_dkv(FusedAttentionArgs a, uint32_t thr) {
  extern __shared__ float4 dkv_raw[];
  dkv_body(DeviceCtx{}, a, thr, *reinterpret_cast<DkvSmem*>(dkv_raw));
}

uint32_t threshold(double p) { return uint32_t(std::ceil(p * 16777216.0)); }   // as the dropout kernels
dim3 grid(int64_t rows, int64_t slices) { return dim3(unsigned((rows + kBlock - 1) / kBlock), unsigned(slices)); }

template <class Kernel> void launch_dynamic(Kernel k, size_t smem, dim3 g, cudaStream_t stream,
                                            const FusedAttentionArgs& a) {
  CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  k<<<g, kThreads, smem, stream>>>(a, threshold(a.p));
  CUDA_LAUNCH_CHECK();
}

}  // namespace

bool flash_attention_fits(const FusedAttentionArgs& a) { return a.D == kD && a.Dv == kD && a.BH <= 65535; }

void flash_attention_forward(const FusedAttentionArgs& a, cudaStream_t stream) {
  if (a.BH * a.Tq == 0) return;
  flash_fwd<<<grid(a.Tq, a.BH), kThreads, 0, stream>>>(a, threshold(a.p));
  CUDA_LAUNCH_CHECK();
}

void flash_attention_backward(const FusedAttentionArgs& a, cudaStream_t stream) {
  if (a.BH * a.Tq > 0) launch_dynamic(flash_bwd_dq, sizeof(DqSmem), grid(a.Tq, a.BH), stream, a);
  if (a.BH * a.Tk > 0) launch_dynamic(flash_bwd_dkv, sizeof(DkvSmem), grid(a.Tk, a.BH), stream, a);
}

}  // namespace oomlab
