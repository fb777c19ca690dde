// embedding.h — kernel argument struct and tables of the embedding family
// (engine/ops/embedding.h): a row gather and its scatter-add backward, contiguous
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

}  // namespace oomlab
