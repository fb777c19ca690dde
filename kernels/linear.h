// linear.h — kernel argument structs and tables of the linear family (engine/ops/linear.h:
// matmul, linear, bmm): row-major GEMM and the row-bias add / bias-gradient reductions.
// Raw contiguous row-major buffers in the table's dtype, explicit dims. CPU kernels:
// kernels/cpu/linear_cpu.cpp (OpenBLAS); CUDA: kernels/cuda/linear.cu (cuBLAS).
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

// Row-major GEMM, strided-batched: for b in [0, batch),
//   C_b[M,N] = alpha * op(A_b)[M,K] * op(B_b)[K,N] + beta * C_b,  X_b = X + b * stride_x
// (strides in elements; batch 1, the default, is one GEMM and ignores them). One launch
// runs the whole batch: cublasGemmStridedBatchedEx on CUDA, a loop over OpenBLAS on the CPU.
struct GemmArgs {
  bool trans_a, trans_b; int64_t M, N, K; double alpha;
  const void* A; int64_t lda; const void* B; int64_t ldb; double beta; void* C; int64_t ldc;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};
// Elements of X that a GemmArgs call touches from X's base: (batch - 1) * stride + rows * ld.
inline int64_t gemm_extent(int64_t batch, int64_t stride, int64_t rows, int64_t ld) {
  return (batch > 1 ? (batch - 1) * stride : 0) + rows * ld;
}
// out[r, c] += bias[c] for r < rows, c < cols (row-major [rows, cols]).
struct BiasAddRowsArgs { void* out; const void* bias; int64_t rows, cols; };
// grad_bias[c] = sum_r grad[r, c] (overwrites).
struct BiasGradRowsArgs { void* grad_bias; const void* grad; int64_t rows, cols; };

OOMLAB_KERNEL_TABLE(gemm, GemmArgs, "gemm")
OOMLAB_KERNEL_TABLE(bias_add_rows, BiasAddRowsArgs, "bias_add_rows")
OOMLAB_KERNEL_TABLE(bias_grad_rows, BiasGradRowsArgs, "bias_grad_rows")

}  // namespace oomlab
