// attention_mma.h — the 16-bit tensor-core fused-attention kernels (kernels/cuda/attention_mma.cu),
// called by kernels/cuda/attention.cu under OOMLAB_CUDA_MMA_ATTENTION (cuda_settings.h) for
// head dims of 64, on the float32 copies of float16 / bfloat16 inputs
// (FusedAttentionArgs::from_16bit, from_f16), ahead of the TF32 kernels (attention_tc.h).
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/attention.h"

namespace oomlab {

bool mma_attention_applies(const FusedAttentionArgs& a);
void mma_attention_forward(const FusedAttentionArgs& a, cudaStream_t stream);
void mma_attention_backward(const FusedAttentionArgs& a, cudaStream_t stream);

}  // namespace oomlab
