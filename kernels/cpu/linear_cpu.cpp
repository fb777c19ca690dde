// linear_cpu.cpp — CPU kernels for the linear family (kernels/linear.h): row-major GEMM
// on OpenBLAS (cblas_sgemm / cblas_dgemm; a strided batch is one GEMM per entry) and the row-bias add / bias-gradient reductions.
// Threading: GEMM is threaded by OpenBLAS only (never called from inside an OpenMP
// region here); the bias loops use OpenMP over columns. The bias gradient sums each
// column over rows in row order, in double, so results do not depend on the thread count.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

#include "kernels/linear.h"

namespace oomlab {
namespace {

inline int to_blas_int(int64_t v) {
  OOMLAB_ASSERT(v >= 0 && v <= INT_MAX);
  return int(v);
}

template <class T> void gemm_cpu(const GemmArgs& a) {
  if (a.M == 0 || a.N == 0 || a.batch == 0) return;
  OOMLAB_ASSERT(a.batch >= 1);
  const CBLAS_TRANSPOSE ta = a.trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = a.trans_b ? CblasTrans : CblasNoTrans;
  const int M = to_blas_int(a.M), N = to_blas_int(a.N), K = to_blas_int(a.K);
  // BLAS requires ld >= 1 even for degenerate operands.
  const int lda = std::max(1, to_blas_int(a.lda)), ldb = std::max(1, to_blas_int(a.ldb));
  const int ldc = std::max(1, to_blas_int(a.ldc));
  const T* A = static_cast<const T*>(a.A);
  const T* B = static_cast<const T*>(a.B);
  T* C = static_cast<T*>(a.C);
  for (int64_t b = 0; b < a.batch; ++b) {   // one GEMM per batch entry, in order
    const T* Ab = A + b * a.stride_a;
    const T* Bb = B + b * a.stride_b;
    T* Cb = C + b * a.stride_c;
    if constexpr (std::is_same_v<T, float>)
      cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, float(a.alpha), Ab, lda, Bb, ldb, float(a.beta), Cb, ldc);
    else
      cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, a.alpha, Ab, lda, Bb, ldb, a.beta, Cb, ldc);
  }
}

template <class T> void bias_add_rows_cpu(const BiasAddRowsArgs& a) {
  T* out = static_cast<T*>(a.out);
  const T* b = static_cast<const T*>(a.bias);
  const int64_t rows = a.rows, cols = a.cols;
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    T* o = out + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) o[c] += b[c];
  }
}

template <class T> void bias_grad_rows_cpu(const BiasGradRowsArgs& a) {
  T* db = static_cast<T*>(a.grad_bias);
  const T* g = static_cast<const T*>(a.grad);
  const int64_t rows = a.rows, cols = a.cols;
  constexpr int64_t kBlock = 256;   // columns per task; each column summed in row order
  const int64_t nblocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * cols > 32768 && nblocks > 1)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kBlock, c1 = std::min(cols, c0 + kBlock);
    double acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* gr = g + r * cols;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += double(gr[c]);
    }
    for (int64_t c = c0; c < c1; ++c) db[c] = T(acc[c - c0]);
  }
}
}  // namespace

void register_linear_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(gemm_kernels(), gemm_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(bias_add_rows_kernels(), bias_add_rows_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(bias_grad_rows_kernels(), bias_grad_rows_cpu);
}

}  // namespace oomlab
