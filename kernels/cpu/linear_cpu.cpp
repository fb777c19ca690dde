// linear_cpu.cpp — CPU kernels for the linear family (kernels/linear.h): row-major GEMM
// on OpenBLAS (cblas_sgemm / cblas_dgemm; a strided batch is one GEMM per entry) and the row-bias add / bias-gradient
// reductions. A GEMM's linear extras (bias, a_row_sums, b_col_sums: kernels/linear.h) run as those two kernels.
// Threading: GEMM is threaded by OpenBLAS only (never called from inside an OpenMP
// region here); the bias loops use OpenMP over columns. The bias gradient sums each
// column over rows in row order, in double, so results do not depend on the thread count.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <type_traits>
#include <vector>

#include "kernels/linear.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {

inline int to_blas_int(int64_t v) {
  OOMLAB_ASSERT(v >= 0 && v <= INT_MAX);
  return int(v);
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

template <class T> void gemm_product_cpu(const GemmArgs& a) {
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

// The product with linear's extras (kernels/linear.h) as the separate kernels above.
template <class T> void gemm_cpu(const GemmArgs& a) {
  OOMLAB_ASSERT(gemm_extras_valid(a));
  run_gemm_sums(a, bias_grad_rows_cpu<T>);
  gemm_product_cpu<T>(a);
  run_gemm_bias(a, bias_add_rows_cpu<T>);
}

// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
template <DType H> void bias_add_rows_half(const BiasAddRowsArgs& a);
template <DType H> void bias_grad_rows_half(const BiasGradRowsArgs& a);
// The product on widened copies, rounded once to H; then linear's extras as the 16-bit
// bias kernels (the rounded product plus the bias, rounded again: the unfused ops' bits).
template <DType H> void gemm_half(const GemmArgs& a) {
  OOMLAB_ASSERT(gemm_extras_valid(a));
  run_gemm_sums(a, bias_grad_rows_half<H>);
  Widen<H> w;
  GemmArgs f = a;
  f.bias = nullptr, f.a_row_sums = nullptr, f.b_col_sums = nullptr;
  f.A = w.in(a.A, gemm_extent(a.batch, a.stride_a, a.trans_a ? a.K : a.M, a.lda));
  f.B = w.in(a.B, gemm_extent(a.batch, a.stride_b, a.trans_b ? a.N : a.K, a.ldb));
  const int64_t cn = gemm_extent(a.batch, a.stride_c, a.M, a.ldc);
  // C's gaps (ldc > N, or batches further apart than M * ldc) are read so that narrowing
  // writes them back unchanged.
  const bool gapless = a.ldc == a.N && (a.batch <= 1 || a.stride_c == a.M * a.ldc);
  f.C = (a.beta != 0 || !gapless) ? w.inout(a.C, cn) : w.overwritten_out(a.C, cn);   // beta 0: C never read
  run_f32(gemm_kernels(), f);
  w.narrow();
  run_gemm_bias(a, bias_add_rows_half<H>);
}
template <DType H> void bias_add_rows_half(const BiasAddRowsArgs& a) {
  Widen<H> w;
  BiasAddRowsArgs f = a;
  f.out = w.inout(a.out, a.rows * a.cols);
  f.bias = w.in(a.bias, a.cols);
  run_f32(bias_add_rows_kernels(), f);
  w.narrow();
}
template <DType H> void bias_grad_rows_half(const BiasGradRowsArgs& a) {
  Widen<H> w;
  BiasGradRowsArgs f = a;
  f.grad_bias = w.out(a.grad_bias, a.cols);
  f.grad = w.in(a.grad, a.rows * a.cols);
  run_f32(bias_grad_rows_kernels(), f);
  w.narrow();
}

template <DType H> void register_linear_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&gemm_half<H>>(gemm_kernels(), cpu, H);
  set_kernel<&bias_add_rows_half<H>>(bias_add_rows_kernels(), cpu, H);
  set_kernel<&bias_grad_rows_half<H>>(bias_grad_rows_kernels(), cpu, H);
}
}  // namespace

void register_linear_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(gemm_kernels(), gemm_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(bias_add_rows_kernels(), bias_add_rows_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(bias_grad_rows_kernels(), bias_grad_rows_cpu);
  register_linear_half<DType::f16>();
  register_linear_half<DType::bf16>();
}

}  // namespace oomlab
