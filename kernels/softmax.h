// softmax.h — kernel argument structs and tables of the softmax family
// (engine/ops/softmax.h): softmax / log_softmax over the rows of [N, C] and the
// attention masked_softmax, forward and backward; contiguous row-major buffers,
// max-shifted, backward kernels overwrite dx. CPU kernels: kernels/cpu/softmax_cpu.cpp;
// CUDA: kernels/cuda/softmax.cu.
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

// rows N, columns C; log selects log_softmax. Backward from the saved output y:
// softmax dx = y * (dy - sum(dy * y)); log_softmax dx = dy - exp(y) * sum(dy).
struct SoftmaxArgs { const void* x; void* y; const void* dy; void* dx; int64_t N, C; bool log; };

// rows x C, softmax over C of scale * x with columns c where mask[b, c] != 0 at -inf;
// b = row / rows_per_batch; mask may be null (no padding). causal_tq > 0 also masks the
// keys after each row's query (torch's is_causal, top-left aligned): row r is query
// r % causal_tq and columns c > r % causal_tq are at -inf. A row whose every column is
// masked gives zeros. Backward: dx = scale * y * (dy - sum(dy * y)) (masked: y = 0).
struct MaskedSoftmaxArgs {
  const void* x; const uint8_t* mask; void* y; const void* dy; void* dx;
  int64_t rows, C, rows_per_batch; double scale;
  int64_t causal_tq = 0;
};

OOMLAB_KERNEL_TABLE(softmax_forward, SoftmaxArgs, "softmax")
OOMLAB_KERNEL_TABLE(softmax_backward, SoftmaxArgs, "softmax_backward")
OOMLAB_KERNEL_TABLE(masked_softmax_forward, MaskedSoftmaxArgs, "masked_softmax")
OOMLAB_KERNEL_TABLE(masked_softmax_backward, MaskedSoftmaxArgs, "masked_softmax_backward")

}  // namespace oomlab
