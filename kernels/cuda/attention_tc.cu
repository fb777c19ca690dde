// attention_tc.cu — tensor-core fused attention (kernels/attention.h) for head dims of 64,
// behind OOMLAB_CUDA_TC_ATTENTION (cuda_settings.h; on since an H200 run of the kit measured
// it): FlashAttention-2's loop order with its matrix products on TF32 tensor cores through
// WMMA 16x16x8 tiles (float32 accumulation), the online softmax, masks and dropout as
// attention_tiled.cu's. The bodies live in attention_tc.cuh (run on emulated thread blocks
// by kernels/cuda/check/attention_tc_check.cu); this file holds the GPU's executor (TcCtx:
// WMMA loads from shared memory, TF32 rounding with __float_to_tf32, lane-pair shuffles),
// the launches (4 warps per 64 rows; 58-104 KiB of dynamic shared memory) and the rule of
// when it applies: float32 buffers that are copies of 16-bit inputs (TF32 holds them
// exactly); D = Dv = 64. Float32 inputs run the flash kernels even with matmul TF32 allowed:
// on an H200 BERT-base b24 s384 took 101.7 ms a step here against their 96.1 (kit run of afbeb1e).
// Not yet run on a GPU (no device when written): the kit's bert384_fused_tc row and the
// attention parity rows under the switch measure and check it.
#include "kernels/cuda/attention_tc.h"

#include <mma.h>

#include <cmath>

#include "kernels/cuda/attention_tc.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_settings.h"

namespace oomlab {
namespace {
using namespace tc;

#ifdef __CUDA_ARCH__
struct TcCtx {
  __device__ int tid() const { return int(threadIdx.x); }
  __device__ int64_t bx() const { return int64_t(blockIdx.x); }
  __device__ int64_t by() const { return int64_t(blockIdx.y); }
  __device__ void sync() const { __syncthreads(); }
  __device__ float pair_max(float v) const { return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1)); }
  __device__ float pair_sum(float v) const { return v + __shfl_xor_sync(0xffffffffu, v, 1); }
  template <bool BCol>
  __device__ void mma(float* c, int ldc, const float* a, int lda, const float* b, int ldb, int K,
                      bool accumulate) const {
    namespace w = nvcuda::wmma;
    using BLayout = std::conditional_t<BCol, w::col_major, w::row_major>;
    w::fragment<w::accumulator, 16, 16, 8, float> fc;
    if (accumulate) w::load_matrix_sync(fc, c, unsigned(ldc), w::mem_row_major);
    else w::fill_fragment(fc, 0.0f);
    for (int k = 0; k < K; k += 8) {
      w::fragment<w::matrix_a, 16, 16, 8, w::precision::tf32, w::row_major> fa;
      w::fragment<w::matrix_b, 16, 16, 8, w::precision::tf32, BLayout> fb;
      w::load_matrix_sync(fa, a + k, unsigned(lda));
      w::load_matrix_sync(fb, BCol ? b + k : b + k * ldb, unsigned(ldb));
      for (int t = 0; t < fa.num_elements; ++t) fa.x[t] = w::__float_to_tf32(fa.x[t]);
      for (int t = 0; t < fb.num_elements; ++t) fb.x[t] = w::__float_to_tf32(fb.x[t]);
      w::mma_sync(fc, fa, fb, fc);
    }
    w::store_matrix_sync(c, fc, unsigned(ldc), w::mem_row_major);
  }
};
#else
struct TcCtx {   // the host pass over the kernels' source: declared, never run
  int tid() const { return 0; }
  int64_t bx() const { return 0; }
  int64_t by() const { return 0; }
  void sync() const {}
  float pair_max(float v) const { return v; }
  float pair_sum(float v) const { return v; }
  template <bool BCol> void mma(float*, int, const float*, int, const float*, int, int, bool) const {}
};
#endif

template <class Smem> __device__ Smem& dynamic_smem() {
  extern __shared__ __align__(32) unsigned char tc_smem[];
  return *reinterpret_cast<Smem*>(tc_smem);
}

__global__ void __launch_bounds__(kThreads) tc_fwd(FusedAttentionArgs a, uint32_t thr) {
  fwd_body(TcCtx{}, a, thr, dynamic_smem<FwdSmem>());
}
__global__ void __launch_bounds__(kThreads) tc_bwd_dq(FusedAttentionArgs a, uint32_t thr) {
  dq_body(TcCtx{}, a, thr, dynamic_smem<DqSmem>());
}
__global__ void __launch_bounds__(kThreads) tc_bwd_dkv(FusedAttentionArgs a, uint32_t thr) {
  dkv_body(TcCtx{}, a, thr, dynamic_smem<DkvSmem>());
}

uint32_t threshold(double p) { return uint32_t(std::ceil(p * 16777216.0)); }   // as the dropout kernels
dim3 grid(int64_t rows, int64_t slices) { return dim3(unsigned((rows + kRows - 1) / kRows), unsigned(slices)); }

// Above 48 KiB a kernel's dynamic shared memory must be allowed explicitly, per device (so
// at every launch: the attribute is host-side state, cheap to set).
template <class Smem, class K> void launch(K kernel, int64_t rows, const FusedAttentionArgs& a, cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(Smem))));
  kernel<<<grid(rows, a.BH), kThreads, sizeof(Smem), stream>>>(a, threshold(a.p));
  CUDA_LAUNCH_CHECK();
}
}  // namespace

bool tc_attention_applies(const FusedAttentionArgs& a) {
  return cuda_tc_attention() && a.D == kD && a.Dv == kD && a.BH <= 65535 && a.from_16bit;
}

void tc_attention_forward(const FusedAttentionArgs& a, cudaStream_t stream) {
  if (a.BH * a.Tq == 0) return;
  launch<FwdSmem>(tc_fwd, a.Tq, a, stream);
}

void tc_attention_backward(const FusedAttentionArgs& a, cudaStream_t stream) {
  if (a.BH * a.Tq > 0) launch<DqSmem>(tc_bwd_dq, a.Tq, a, stream);
  if (a.BH * a.Tk > 0) launch<DkvSmem>(tc_bwd_dkv, a.Tk, a, stream);
}

}  // namespace oomlab
