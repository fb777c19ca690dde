// linear.h — matmul and linear (y = x W^T + b) on OpenBLAS / cuBLAS.
// Shapes: matmul a[M,K] x b[K,N] -> [M,N]; linear x[N,in], w[out,in], b[out] -> [N,out].
// Saved for backward: linear saves x (only if w needs grad) and w (only if x needs
// grad); the bias gradient needs nothing. matmul saves a (if b needs grad) and b (if a
// needs grad). Errors: ShapeError "linear: input [N, k] and weight [out, in] ..." naming
// both shapes (PyTorch: "mat1 and mat2 shapes cannot be multiplied (AxB and CxD)").
#pragma once
#include "engine/core/dispatch.h"
#include "engine/core/tensor.h"

namespace oomlab {

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias /* may be undefined */);

// ---- kernels ----
// Row-major GEMM: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C.
struct GemmArgs {
  bool trans_a, trans_b; int64_t M, N, K; double alpha;
  const void* A; int64_t lda; const void* B; int64_t ldb; double beta; void* C; int64_t ldc;
};
// out[r, c] += bias[c] for r < rows, c < cols (row-major [rows, cols]).
struct BiasAddRowsArgs { void* out; const void* bias; int64_t rows, cols; };
// grad_bias[c] = sum_r grad[r, c] (overwrites).
struct BiasGradRowsArgs { void* grad_bias; const void* grad; int64_t rows, cols; };
KernelTable<GemmArgs>& gemm_kernels();
KernelTable<BiasAddRowsArgs>& bias_add_rows_kernels();
KernelTable<BiasGradRowsArgs>& bias_grad_rows_kernels();

}  // namespace oomlab
