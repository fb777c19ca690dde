// embedding.h — kernel argument struct and tables of the embedding family
// (engine/ops/embedding.h): a row gather and its scatter-add backward (and a token batch's
// positions, types and padding mask: token_inputs), contiguous
// row-major buffers, explicit dims. Deterministic (no atomics; the result does not depend
// on the thread count). CPU kernels: kernels/cpu/embedding_cpu.cpp; CUDA:
// kernels/cuda/embedding.cu.
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

OOMLAB_KERNEL_TABLE(embedding_forward, EmbeddingArgs, "embedding")
OOMLAB_KERNEL_TABLE(embedding_backward, EmbeddingArgs, "embedding_backward")

// A BERT batch's index tensors from its token ids [B, T] (0 = padding), on the ids' device:
// positions[b, t] = t, types[b, t] = 0, padding[b, t] = (ids[b, t] == 0); a null output is
// skipped. Indexed by int64 (the ids' dtype).
struct TokenInputsArgs {
  const int64_t* ids; int64_t* positions; int64_t* types; uint8_t* padding;
  int64_t B, T;
};
OOMLAB_KERNEL_TABLE(token_inputs, TokenInputsArgs, "token_inputs")

}  // namespace oomlab
