// attention_tiled.h — the shared-memory tiled float32 fused-attention kernels
// (kernels/cuda/attention_tiled.cu), called by kernels/cuda/attention.cu when the
// tiled-attention switch is on (cuda_settings.h) and the head dims fit.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/attention.h"

namespace oomlab {

bool tiled_attention_fits(const FusedAttentionArgs& a);   // head dims <= 128, slices <= 65535
void tiled_attention_forward(const FusedAttentionArgs& a, cudaStream_t stream);
void tiled_attention_backward(const FusedAttentionArgs& a, cudaStream_t stream);

}  // namespace oomlab
