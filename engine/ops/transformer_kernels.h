// transformer_kernels.h — kernel argument structs and kernel tables for the transformer
// ops embedding and layer_norm (gelu: kernels/activation.h, masked_softmax:
// kernels/softmax.h). Raw pointers, contiguous row-major buffers, explicit dims.
// The tables are defined in the op files (engine/ops/<op>.cpp); CPU kernels live in
// kernels/cpu/transformer_cpu.cpp (register_transformer_cpu_kernels). Every kernel is
// deterministic: its result does not depend on the thread count.
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

// Forward: out[n, :] = weight[ids[n], :] for n < N (ids out of [0, V) give zeros; the op
// rejects them on cpu). Backward: dweight (fully overwritten) = sum over n in order of
// dout[n, :] into row ids[n], skipping ids == padding_idx (padding_idx < 0: none).
struct EmbeddingArgs {
  const void* weight; const int64_t* ids; void* out;
  const void* dout; void* dweight;
  int64_t N, V, H, padding_idx;
};

// Over the last dim H of x [rows, H]: mean/rstd [rows] (x's dtype; float32 for f16/bf16 x),
// y = (x - mean) * rstd * weight + bias; weight / bias may be null (1 / 0). Backward: dx,
// dweight, dbias (each may be null = not wanted; overwritten) from x, weight, mean, rstd, dy.
struct LayerNormArgs {
  const void* x; const void* weight; const void* bias; void* y; void* mean; void* rstd;
  const void* dy; void* dx; void* dweight; void* dbias;
  int64_t rows, H; double eps;
};

KernelTable<EmbeddingArgs>& embedding_forward_kernels();
KernelTable<EmbeddingArgs>& embedding_backward_kernels();
KernelTable<LayerNormArgs>& layer_norm_forward_kernels();
KernelTable<LayerNormArgs>& layer_norm_backward_kernels();

}  // namespace oomlab
