// linear.h — matmul, linear (y = x W^T + b) and bmm, as torch.nn.functional / torch.bmm,
// on the GEMM kernels of kernels/linear.h (OpenBLAS / cuBLAS).
// Shapes: matmul a[M,K] x b[K,N] -> [M,N]; linear x[..., in], w[out,in], b[out] ->
// [..., out] (w may be the transposed view of a contiguous [in, out] matrix, as GPT-2's
// Conv1D's x @ W: used in place, its gradient the same transposed view); bmm a[B,M,K] x
// b[B,K,N] -> [B,M,N].
// Saved for backward: linear saves x (only if w needs grad) and w (only if x needs
// grad); the bias gradient needs nothing. matmul and bmm save a (if b needs grad) and b
// (if a needs grad). Errors: ShapeError "linear: input [N, k] and weight [out, in] ..."
// naming both shapes (PyTorch: "mat1 and mat2 shapes cannot be multiplied (AxB and CxD)").
#pragma once
#include "engine/core/tensor.h"

namespace oomlab {

Tensor matmul(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias /* may be undefined */);
Tensor bmm(const Tensor& a, const Tensor& b);

}  // namespace oomlab
