// linear.h — kernel argument structs and tables of the linear family (engine/ops/linear.h:
// matmul, linear, bmm): row-major GEMM and the row-bias add / bias-gradient reductions.
// Raw contiguous row-major buffers in the table's dtype, explicit dims. CPU kernels:
// kernels/cpu/linear_cpu.cpp (OpenBLAS); CUDA: kernels/cuda/linear.cu (cuBLAS).
#pragma once
#include <string_view>
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

// Row-major GEMM, strided-batched: for b in [0, batch),
//   C_b[M,N] = alpha * op(A_b)[M,K] * op(B_b)[K,N] + beta * C_b,  X_b = X + b * stride_x
// (strides in elements; batch 1, the default, is one GEMM and ignores them). One launch
// runs the whole batch: cublasGemmStridedBatchedEx on CUDA, a loop over OpenBLAS on the CPU.
// Linear's extras, with one GEMM (batch 1, alpha 1, beta 0; gemm_extras_valid):
//   bias:       C[m, n] += bias[n] after the product (bias_add_rows, below; needs ldc == N);
//   a_row_sums: [M] = sum over k of op(A)[m, k], A stored [K, M] (trans_a, lda == M): the bias
//               gradient of dW = g^T x (bias_grad_rows of g);
//   b_col_sums: [N] = sum over k of op(B)[k, n], B stored [K, N] (!trans_b, ldb == N): the same
//               for dW^T = x^T g (a weight kept as its transpose).
// Every backend computes them as bias_add_rows / bias_grad_rows would (run_gemm_extras), but
// CUDA under OOMLAB_CUDA_LINEAR_LT (cuda_settings.h), which fuses them into a cuBLASLt
// matmul's epilogue: the same sums to rounding, not bit for bit.
struct GemmArgs {
  bool trans_a, trans_b; int64_t M, N, K; double alpha;
  const void* A; int64_t lda; const void* B; int64_t ldb; double beta; void* C; int64_t ldc;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  const void* bias = nullptr;
  void* a_row_sums = nullptr;
  void* b_col_sums = nullptr;
};
// flop_counter.h: 2 M N K per matrix of the batch.
inline double kernel_flops(const GemmArgs& a, std::string_view) {
  return 2.0 * double(a.M) * double(a.N) * double(a.K) * double(a.batch);
}
inline MatrixKind kernel_matrix_kind(const GemmArgs&) { return MatrixKind::gemm; }
// Elements of X that a GemmArgs call touches from X's base: (batch - 1) * stride + rows * ld.
inline int64_t gemm_extent(int64_t batch, int64_t stride, int64_t rows, int64_t ld) {
  return (batch > 1 ? (batch - 1) * stride : 0) + rows * ld;
}
// out[r, c] += bias[c] for r < rows, c < cols (row-major [rows, cols]).
struct BiasAddRowsArgs { void* out; const void* bias; int64_t rows, cols; };
// grad_bias[c] = sum_r grad[r, c] (overwrites).
struct BiasGradRowsArgs { void* grad_bias; const void* grad; int64_t rows, cols; };

inline bool gemm_has_extras(const GemmArgs& a) { return a.bias || a.a_row_sums || a.b_col_sums; }
inline bool gemm_extras_valid(const GemmArgs& a) {
  return !gemm_has_extras(a) ||
         (a.batch == 1 && a.alpha == 1.0 && a.beta == 0.0 && (!a.bias || a.ldc == a.N) &&
          (!a.a_row_sums || (a.trans_a && a.lda == a.M)) && (!a.b_col_sums || (!a.trans_b && a.ldb == a.N)));
}
// The extras as the family's separate kernels: the sums (which read A and B only) by `sums`,
// the bias by `add` (call it after the product).
template <class SumFn> void run_gemm_sums(const GemmArgs& a, SumFn&& sums) {
  if (a.a_row_sums) sums(BiasGradRowsArgs{a.a_row_sums, a.A, a.K, a.M});
  if (a.b_col_sums) sums(BiasGradRowsArgs{a.b_col_sums, a.B, a.K, a.N});
}
template <class AddFn> void run_gemm_bias(const GemmArgs& a, AddFn&& add) {
  if (a.bias) add(BiasAddRowsArgs{a.C, a.bias, a.M, a.N});
}

OOMLAB_KERNEL_TABLE(gemm, GemmArgs, "gemm")
OOMLAB_KERNEL_TABLE(bias_add_rows, BiasAddRowsArgs, "bias_add_rows")
OOMLAB_KERNEL_TABLE(bias_grad_rows, BiasGradRowsArgs, "bias_grad_rows")

}  // namespace oomlab
