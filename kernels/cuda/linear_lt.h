// linear_lt.h — linear's GEMM with its extras (kernels/linear.h: the bias add, the bias
// gradient) in the epilogue of one cuBLASLt matmul, under OOMLAB_CUDA_LINEAR_LT
// (cuda_settings.h). Called by linear.cu's gemm kernel only, inside its launch.
#pragma once
#include "engine/core/dtype.h"
#include "kernels/linear.h"

namespace oomlab::cuda {
// Runs `a` (gemm_extras_valid, with an extra, batch 1, M, N, K > 0; float32, float16 or
// bfloat16) as one cublasLtMatmul on the compute stream, with a workspace of
// cublas_workspace_bytes from the caching allocator (as a cuBLAS call has). Returns false,
// launching nothing, when cuBLASLt offers no algorithm for it (remembered per shape): the
// caller then runs the unfused path.
bool gemm_lt(const GemmArgs& a, DType t);
}  // namespace oomlab::cuda
