// collective.h — the kernels the thread-rank (local) communicator and the host reductions
// of the library backends run on a rank's buffers (engine/parallel/communicator.h), so that
// a rank on a cuda device reduces on the device and a cpu rank on the host, with the same
// results:
//   reduce_pair:   dst[i] = op(a[i], b[i]) for i < n; op sum, or max with NaN winning (a's
//                  NaN first); float16 / bfloat16 through float32, rounded once per call
//                  (NCCL's per-hop rule); dst may alias a or b.
//   divide_count:  p[i] /= count (avg's last step): floats divided exactly (not multiplied
//                  by a rounded 1/count), int64 truncating toward zero, 16-bit through float.
// dtypes: float32, float64, float16, bfloat16, int64. CPU: kernels/cpu/collective_cpu.cpp;
// CUDA: kernels/cuda/collective.cu (bit for bit the CPU's on values the CPU does not flush).
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

enum class PairOp { sum, max };
struct ReducePairArgs { void* dst; const void* a; const void* b; int64_t n; PairOp op; };
struct DivideCountArgs { void* p; int64_t n; int64_t count; };

OOMLAB_KERNEL_TABLE(reduce_pair, ReducePairArgs, "reduce_pair")
OOMLAB_KERNEL_TABLE(divide_count, DivideCountArgs, "divide_count")

}  // namespace oomlab
