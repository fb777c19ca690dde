// attention_mma.cu — fused attention on 16-bit tensor cores (kernels/attention.h) for head
// dims of 64, behind OOMLAB_CUDA_MMA_ATTENTION (cuda_settings.h; default off until a GPU run
// of the kit measures it against the TF32 kernels of attention_tc.cu, which took BERT-base
// b24 s384 bf16 to 108.9 ms a step on an H100 against PyTorch SDPA's 58.3, kit run of aa21f01).
// FlashAttention-2's scheme with every matrix product an mma.sync.m16n8k16 in float16 or
// bfloat16 (float32 accumulation) and the scores, probabilities and dS kept in registers
// (attention_mma.cuh, whose bodies CPU CI runs on emulated warps:
// kernels/cuda/check/attention_mma_check.cu). This file holds the GPU's executor (MmaCtx:
// the PTX mma, round-to-nearest packing with __floats2half2_rn / __floats2bfloat162_rn, quad
// shuffles), the launches (128 threads per 64 rows; 28-38 KiB of static shared memory) and
// the rule of when it applies: float32 copies of 16-bit inputs (their values are exact in
// the 16-bit type again), D = Dv = 64. Deterministic: each output element written by one
// thread, no atomics. Not yet run on a GPU (no device when written): test_cuda_next's
// CudaMmaAttention row and test_cuda_parity's attention rows under NEXT check it, the kit's
// bert_bf16_fused_next and bert384_fused_bf16_next rows time it.
#include "kernels/cuda/attention_mma.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_settings.h"

namespace oomlab {
namespace {
using namespace mma;

#ifdef __CUDA_ARCH__
template <bool F16> struct MmaCtx {
  __device__ int tid() const { return int(threadIdx.x); }
  __device__ int64_t bx() const { return int64_t(blockIdx.x); }
  __device__ int64_t by() const { return int64_t(blockIdx.y); }
  __device__ void sync() const { __syncthreads(); }
  __device__ float quad_max(float v) const {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  }
  __device__ float quad_sum(float v) const {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
  }
  __device__ uint32_t pack(float lo, float hi) const {
    uint32_t r;
    if constexpr (F16) {
      const __half2 h = __floats2half2_rn(lo, hi);
      memcpy(&r, &h, 4);
    } else {
      const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
      memcpy(&r, &h, 4);
    }
    return r;
  }
  __device__ void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) const {
    if constexpr (F16)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
          : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
#else
template <bool F16> struct MmaCtx {   // the host pass over the kernels' source: declared, never run
  int tid() const { return 0; }
  int64_t bx() const { return 0; }
  int64_t by() const { return 0; }
  void sync() const {}
  float quad_max(float v) const { return v; }
  float quad_sum(float v) const { return v; }
  uint32_t pack(float, float) const { return 0; }
  void mma(float (&)[4], const uint32_t (&)[4], const uint32_t (&)[2]) const {}
};
#endif

template <bool F16> __global__ void __launch_bounds__(kThreads) mma_fwd(FusedAttentionArgs a, uint32_t thr) {
  __shared__ FwdSmem s;
  fwd_body(MmaCtx<F16>{}, a, thr, s);
}
template <bool F16> __global__ void __launch_bounds__(kThreads) mma_bwd_dq(FusedAttentionArgs a, uint32_t thr) {
  __shared__ DqSmem s;
  dq_body(MmaCtx<F16>{}, a, thr, s);
}
template <bool F16> __global__ void __launch_bounds__(kThreads) mma_bwd_dkv(FusedAttentionArgs a, uint32_t thr) {
  __shared__ DkvSmem s;
  dkv_body(MmaCtx<F16>{}, a, thr, s);
}

uint32_t threshold(double p) { return uint32_t(std::ceil(p * 16777216.0)); }   // as the dropout kernels
dim3 grid(int64_t rows, int64_t slices) { return dim3(unsigned((rows + kRows - 1) / kRows), unsigned(slices)); }

template <class K> void launch(K kernel, int64_t rows, const FusedAttentionArgs& a, cudaStream_t stream) {
  kernel<<<grid(rows, a.BH), kThreads, 0, stream>>>(a, threshold(a.p));
  CUDA_LAUNCH_CHECK();
}
}  // namespace

bool mma_attention_applies(const FusedAttentionArgs& a) {
  return cuda_mma_attention() && a.D == kD && a.Dv == kD && a.BH <= 65535 && a.from_16bit;
}

void mma_attention_forward(const FusedAttentionArgs& a, cudaStream_t stream) {
  if (a.BH * a.Tq == 0) return;
  launch(a.from_f16 ? mma_fwd<true> : mma_fwd<false>, a.Tq, a, stream);
}

void mma_attention_backward(const FusedAttentionArgs& a, cudaStream_t stream) {
  if (a.BH * a.Tq > 0) launch(a.from_f16 ? mma_bwd_dq<true> : mma_bwd_dq<false>, a.Tq, a, stream);
  if (a.BH * a.Tk > 0) launch(a.from_f16 ? mma_bwd_dkv<true> : mma_bwd_dkv<false>, a.Tk, a, stream);
}

}  // namespace oomlab
