// attention_flash.h — register-tiled float32 fused-attention kernels for head dims of 64
// (kernels/cuda/attention_flash.cu), called by kernels/cuda/attention.cu when the
// flash-attention switch is on (cuda_settings.h) and the call fits; otherwise the tiled or the
// reference kernels run.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/attention.h"

namespace oomlab {

bool flash_attention_fits(const FusedAttentionArgs& a);   // D = Dv = 64, slices <= 65535
void flash_attention_forward(const FusedAttentionArgs& a, cudaStream_t stream);
void flash_attention_backward(const FusedAttentionArgs& a, cudaStream_t stream);

}  // namespace oomlab
