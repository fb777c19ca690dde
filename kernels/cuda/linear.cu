// linear.cu — the CUDA kernels of the linear family (kernels/linear.h), for float32,
// float64, float16 and bfloat16:
//   gemm on cuBLAS. GemmArgs is row-major: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] +
//     beta * C. A row-major buffer read column-major is its transpose, so the call computes
//       C^T[N,M] = op(B)^T op(A)^T   as   cublasGemmEx(opB, opA, N, M, K, B, ldb, A, lda, C, ldc)
//     with the same leading dimensions. Overwrite/accumulate follows beta exactly as BLAS:
//     beta == 0 never reads C. K == 0 (an empty sum) is handled here: C = beta * C.
//     Compute types: float32 -> CUBLAS_COMPUTE_32F (strict fp32, PyTorch's default) or
//     CUBLAS_COMPUTE_32F_FAST_TF32 when cuda_matmul_allow_tf32(); float64 -> 64F;
//     float16/bfloat16 -> 32F accumulation (alpha/beta in float). A strided batch
//     (batch > 1) is one cublasGemmStridedBatchedEx with the same mapping per entry.
//     The handle's workspace comes from the caching allocator (cuda_libs.h). Dimensions
//     and the batch count must fit in int.
//   bias_add_rows  out[r, c] += bias[c] (accumulates into out), in the compute type (T for
//     float/double, float for half types);
//   bias_grad_rows grad_bias[c] = sum_r grad[r, c] (overwrites), accumulated in double (the
//     CPU kernel's accumulator) in a fixed order: one block per 8 columns, 64 row lanes
//     summed in lane order (dense_common.cuh).
//   gemm's linear extras (GemmArgs' bias, a_row_sums, b_col_sums) run as those two kernels
//     around the product, or under OOMLAB_CUDA_LINEAR_LT in a cuBLASLt epilogue (linear_lt.cu).
#include <algorithm>
#include <climits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_libs.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/dense_common.cuh"
#include "kernels/cuda/linear_lt.h"
#include "kernels/linear.h"

namespace oomlab {
namespace {

// ---- gemm (cuBLAS) ----------------------------------------------------------------------
int to_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw NotImplementedError(str_cat("op 'gemm' on cuda: ", what, " = ", v, " does not fit cuBLAS's int arguments"));
  return int(v);
}

cudaDataType_t cuda_data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::f16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: throw InternalError(str_cat("gemm_cuda: unsupported dtype ", dtype_name(t)));
  }
}

// Scalars: double for float64, float otherwise (the compute type's scalar type).
struct Scalars {
  float f_alpha = 0, f_beta = 0;
  double d_alpha = 0, d_beta = 0;
  bool is_double = false;
  Scalars(DType t, double alpha, double beta) : is_double(t == DType::f64) {
    d_alpha = alpha; d_beta = beta; f_alpha = float(alpha); f_beta = float(beta);
  }
  const void* alpha() const { return is_double ? static_cast<const void*>(&d_alpha) : &f_alpha; }
  const void* beta() const { return is_double ? static_cast<const void*>(&d_beta) : &f_beta; }
  cudaDataType_t type() const { return is_double ? CUDA_R_64F : CUDA_R_32F; }
};

// C[M,N] (row stride ldc) = beta * C: the K == 0 case.
void scale_c(cublasHandle_t h, int device, const GemmArgs& a, DType t) {
  const size_t es = dtype_size(t);
  if (a.beta == 0.0) {   // BLAS: C is not read when beta == 0 (NaNs are overwritten)
    CUDA_CHECK(cudaMemset2DAsync(a.C, size_t(a.ldc) * es, 0, size_t(a.N) * es, size_t(a.M),
                                 cuda::compute_stream(device)));
    return;
  }
  if (a.beta == 1.0) return;
  const Scalars s(t, a.beta, 0.0);
  const cudaDataType_t dt = cuda_data_type(t);
  if (a.ldc == a.N) {
    CUBLAS_CHECK(cublasScalEx(h, to_int(a.M * a.N, "M*N"), s.alpha(), s.type(), a.C, dt, 1, s.type()));
    return;
  }
  for (int64_t r = 0; r < a.M; ++r)
    CUBLAS_CHECK(cublasScalEx(h, to_int(a.N, "N"), s.alpha(), s.type(),
                              static_cast<char*>(a.C) + size_t(r * a.ldc) * es, dt, 1, s.type()));
}

void gemm_product_cuda(const GemmArgs& a, DType t) {
  if (a.M == 0 || a.N == 0 || a.batch == 0) return;
  OOMLAB_ASSERT(a.M > 0 && a.N > 0 && a.K >= 0 && a.batch >= 1 && a.C != nullptr);
  const int M = to_int(a.M, "M"), N = to_int(a.N, "N"), K = to_int(a.K, "K");
  const int batch = to_int(a.batch, "batch");
  const int lda = std::max(1, to_int(a.lda, "lda")), ldb = std::max(1, to_int(a.ldb, "ldb"));
  const int ldc = std::max(1, to_int(a.ldc, "ldc"));
  const int device = cuda::kernel_device("gemm");
  cuda::DeviceGuard guard(device);
  const cuda::CublasCall blas(device);
  cublasHandle_t h = blas.handle();
  if (K == 0) {
    const size_t es = dtype_size(t);
    for (int64_t b = 0; b < a.batch; ++b) {
      GemmArgs one = a;
      one.C = static_cast<char*>(a.C) + size_t(b * a.stride_c) * es;
      scale_c(h, device, one, t);
    }
    return;
  }
  OOMLAB_ASSERT(a.A != nullptr && a.B != nullptr);

  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (t == DType::f64) compute = CUBLAS_COMPUTE_64F;
  else if (t == DType::f32 && cuda_matmul_allow_tf32()) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  const cudaDataType_t dt = cuda_data_type(t);
  const Scalars s(t, a.alpha, a.beta);
  const cublasOperation_t op_a = a.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = a.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1) {
    CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, N, M, K, s.alpha(), a.B, dt, ldb, a.A, dt, lda, s.beta(), a.C, dt,
                              ldc, compute, CUBLAS_GEMM_DEFAULT));
  } else {   // one call for the whole batch (bmm: batch x heads products in attention)
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op_b, op_a, N, M, K, s.alpha(), a.B, dt, ldb, a.stride_b, a.A, dt,
                                            lda, a.stride_a, s.beta(), a.C, dt, ldc, a.stride_c, batch, compute,
                                            CUBLAS_GEMM_DEFAULT));
  }
  if (cuda::sync_after_launch()) CUDA_CHECK(cudaDeviceSynchronize());
}

// ---- bias_add_rows / bias_grad_rows -----------------------------------------------------
namespace dense = cuda::dense;
using dense::kBlock;
using dense::Num;

template <class T>
__global__ void bias_add_rows_kernel(T* __restrict__ out, const T* __restrict__ b, int64_t cols, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = Num<T>::from(Num<T>::to(out[i]) + Num<T>::to(b[i % cols]));
}

// Column sums of a row-major [rows, cols] matrix: block (kColTile x kRowLanes) owns
// kColTile columns; lane y sums rows y, y + kRowLanes, ...; lanes are added in order.
constexpr int kColTile = 8, kRowLanes = 64;
template <class T>
__global__ void col_sum_kernel(const T* __restrict__ g, int64_t rows, int64_t cols, T* __restrict__ db) {
  __shared__ double sh[kRowLanes][kColTile + 1];
  for (int64_t c0 = int64_t(blockIdx.x) * kColTile; c0 < cols; c0 += int64_t(gridDim.x) * kColTile) {
    const int64_t c = c0 + threadIdx.x;
    double acc = 0.0;
    if (c < cols) {
      int64_t r = threadIdx.y;
      for (; r + 3 * kRowLanes < rows; r += 4 * kRowLanes) {
        const double v0 = double(Num<T>::to(g[r * cols + c]));
        const double v1 = double(Num<T>::to(g[(r + kRowLanes) * cols + c]));
        const double v2 = double(Num<T>::to(g[(r + 2 * kRowLanes) * cols + c]));
        const double v3 = double(Num<T>::to(g[(r + 3 * kRowLanes) * cols + c]));
        acc += v0; acc += v1; acc += v2; acc += v3;
      }
      for (; r < rows; r += kRowLanes) acc += double(Num<T>::to(g[r * cols + c]));
    }
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      double s = 0.0;
      for (int k = 0; k < kRowLanes; ++k) s += sh[k][threadIdx.x];
      db[c] = Num<T>::from(typename Num<T>::C(s));
    }
    __syncthreads();
  }
}

template <class T> void bias_add_rows_cuda(const BiasAddRowsArgs& a) {
  const int64_t n = a.rows * a.cols;
  if (n == 0) return;
  const int dev = cuda::kernel_device("bias_add_rows");
  cuda::DeviceGuard guard(dev);
  bias_add_rows_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<T*>(a.out), static_cast<const T*>(a.bias), a.cols, n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void bias_grad_rows_cuda(const BiasGradRowsArgs& a) {
  if (a.cols == 0) return;
  const int dev = cuda::kernel_device("bias_grad_rows");
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::compute_stream(dev);
  T* db = static_cast<T*>(a.grad_bias);
  if (a.rows == 0) {   // empty sum
    CUDA_CHECK(cudaMemsetAsync(db, 0, size_t(a.cols) * sizeof(T), stream));
    return;
  }
  const int64_t tiles = (a.cols + kColTile - 1) / kColTile;
  const dim3 grid{unsigned(tiles < 65535 ? tiles : 65535)}, block{unsigned(kColTile), unsigned(kRowLanes)};
  col_sum_kernel<T><<<grid, block, 0, stream>>>(static_cast<const T*>(a.grad), a.rows, a.cols, db);
  CUDA_LAUNCH_CHECK();
}

// The GEMM with linear's extras (kernels/linear.h): fused into one cuBLASLt matmul under
// OOMLAB_CUDA_LINEAR_LT where cuBLASLt offers an algorithm for it (linear_lt.cu), otherwise
// cublasGemmEx and the kernels above, in the CPU's order: sums, product, bias.
template <class T, DType kT> void gemm_cuda_t(const GemmArgs& a) {
  OOMLAB_ASSERT(gemm_extras_valid(a));
  if (gemm_has_extras(a) && kT != DType::f64 && cuda_linear_lt() && cuda::gemm_lt(a, kT)) return;
  run_gemm_sums(a, bias_grad_rows_cuda<T>);
  gemm_product_cuda(a, kT);
  run_gemm_bias(a, bias_add_rows_cuda<T>);
}

template <class T> void set_bias_rows(DType t) {
  set_kernel<&bias_add_rows_cuda<T>>(bias_add_rows_kernels(), DeviceType::cuda, t);
  set_kernel<&bias_grad_rows_cuda<T>>(bias_grad_rows_kernels(), DeviceType::cuda, t);
}
}  // namespace

void register_linear_cuda_kernels() {
  set_kernel<&gemm_cuda_t<float, DType::f32>>(gemm_kernels(), DeviceType::cuda, DType::f32);
  set_kernel<&gemm_cuda_t<double, DType::f64>>(gemm_kernels(), DeviceType::cuda, DType::f64);
  set_kernel<&gemm_cuda_t<__half, DType::f16>>(gemm_kernels(), DeviceType::cuda, DType::f16);
  set_kernel<&gemm_cuda_t<__nv_bfloat16, DType::bf16>>(gemm_kernels(), DeviceType::cuda, DType::bf16);
  set_bias_rows<float>(DType::f32);
  set_bias_rows<double>(DType::f64);
  set_bias_rows<__half>(DType::f16);
  set_bias_rows<__nv_bfloat16>(DType::bf16);
}

}  // namespace oomlab
