// attention_tc.h — the tensor-core fused-attention kernels (kernels/cuda/attention_tc.cu),
// called by kernels/cuda/attention.cu under OOMLAB_CUDA_TC_ATTENTION (cuda_settings.h) for
// head dims of 64, on the float32 copies of 16-bit inputs (FusedAttentionArgs::from_16bit),
// whose values TF32 holds exactly.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/attention.h"

namespace oomlab {

bool tc_attention_applies(const FusedAttentionArgs& a);
void tc_attention_forward(const FusedAttentionArgs& a, cudaStream_t stream);
void tc_attention_backward(const FusedAttentionArgs& a, cudaStream_t stream);

}  // namespace oomlab
