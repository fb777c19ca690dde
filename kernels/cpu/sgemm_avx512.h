// sgemm_avx512.h — a single-threaded float32 GEMM on AVX-512 for the conv kernels' tiles
// (internal to the CPU backend). OpenBLAS runs the kernels its core type selects; where
// that is an AVX2 core on an AVX-512 CPU (OpenBLAS 0.3.21 on AMD Zen 4/5, or
// OPENBLAS_CORETYPE=Haswell in the environment, as on the machines oomlab is measured on),
// the conv path uses this GEMM instead: packed panels (12 rows of A x 32 columns of B, K in
// blocks of 256) and a 12x32 register-blocked micro-kernel (12x16 for strips of <= 16
// columns); A strips are row copies, or k-major when A is given transposed.
// Contracts:
//  * Row-major C[M, N] (ldc) = op(A) op(B) + beta * C, op(A) = A [M, K] (lda) or, trans_a,
//    A stored [K, M]; op(B) = B [K, N] (ldb) or, trans_b, B stored [N, K]; beta 0 or 1 (C is
//    not read when beta is 0). K = 0 gives beta * C.
//  * Deterministic: each C element is the sum over K blocks in order of fused multiply-adds
//    in k order, whatever the thread that calls it; thread-safe (thread-local scratch).
//  * Call only when sgemm_avx512_available() (the CPU has AVX-512F).
#pragma once
#include <cstdint>

namespace oomlab {

bool sgemm_avx512_available();
void sgemm_avx512(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                  const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The same GEMM with op(A) packed once and reused (a conv's weights across its tiles):
// sgemm_avx512_pack_a writes sgemm_avx512_packed_a_size(M, K) floats; the packed panel is
// read-only afterwards (share it between threads). Same results as sgemm_avx512.
int64_t sgemm_avx512_packed_a_size(int64_t M, int64_t K);
void sgemm_avx512_pack_a(bool trans_a, int64_t M, int64_t K, const float* A, int64_t lda, float* packed);
// trans_a: as given to sgemm_avx512_pack_a (it decides the packed layout).
void sgemm_avx512_packed(bool trans_a, const float* packed_a, int64_t M, int64_t K, bool trans_b, int64_t N,
                         const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

}  // namespace oomlab
