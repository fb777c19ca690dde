// test_sgemm_avx512.cpp — the conv path's AVX-512 GEMM (kernels/cpu/sgemm_avx512.h) against a
// float64 reference, table-driven over the four transpose cases, edge sizes (1, not a multiple
// of the 12x32 micro-tile, K spanning several 256-blocks, N spanning several 2048-blocks),
// leading dimensions larger than the matrix, beta 0 (C not read: NaN-filled) and beta 1; and
// bitwise reproducibility of repeated calls. Skips where the CPU has no AVX-512F.
// ctest tier: ops
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/sgemm_avx512.h"

using namespace oomlab;

namespace {
std::vector<float> values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  for (float& x : v) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    x = float(double(s >> 11) / double(1ull << 53) * 2.0 - 1.0);
  }
  return v;
}

struct GemmCase { bool ta, tb; int64_t M, N, K, pad; float beta; };

std::string name(const GemmCase& c) {
  return std::string(c.ta ? "T" : "N") + (c.tb ? "T" : "N") + " M" + std::to_string(c.M) + " N" + std::to_string(c.N) +
         " K" + std::to_string(c.K) + " beta" + std::to_string(int(c.beta));
}
}  // namespace

TEST(SgemmAvx512, MatchesFloat64ReferenceAcrossShapesAndLayouts) {
  if (!sgemm_avx512_available()) GTEST_SKIP() << "no AVX-512F on this CPU";
  const std::vector<GemmCase> cases = {
      {false, false, 1, 1, 1, 0, 0}, {false, false, 12, 32, 7, 0, 0}, {false, false, 13, 33, 300, 3, 0},
      {true, false, 64, 200, 576, 0, 0}, {false, true, 64, 576, 200, 5, 1}, {true, true, 25, 47, 513, 2, 1},
      {false, false, 130, 2100, 20, 1, 1}, {false, true, 512, 16, 4608, 0, 0}, {true, false, 4608, 16, 512, 0, 0},
      {false, false, 7, 5, 0, 0, 1}, {false, false, 7, 5, 0, 0, 0}, {true, true, 121, 95, 257, 4, 0}};
  for (const GemmCase& c : cases) {
    const int64_t am = c.ta ? c.K : c.M, an = c.ta ? c.M : c.K, bm = c.tb ? c.N : c.K, bn = c.tb ? c.K : c.N;
    const int64_t lda = an + c.pad, ldb = bn + c.pad, ldc = c.N + c.pad;
    const std::vector<float> A = values(size_t(am * lda), 1 + c.M), B = values(size_t(bm * ldb), 2 + c.N);
    std::vector<float> C0 = values(size_t(c.M * ldc), 3 + c.K);
    std::vector<float> C = C0;
    if (c.beta == 0)
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) C[size_t(i * ldc + j)] = NAN;   // must not be read
    sgemm_avx512(c.ta, c.tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, c.beta, C.data(), ldc);
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        double ref = c.beta != 0 ? double(C0[size_t(i * ldc + j)]) : 0.0, mag = std::fabs(ref);
        for (int64_t k = 0; k < c.K; ++k) {
          const double a = c.ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)];
          const double b = c.tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)];
          ref += a * b;
          mag += std::fabs(a * b);
        }
        ASSERT_LE(std::fabs(double(C[size_t(i * ldc + j)]) - ref), 2e-6 * mag + 1e-30)
            << name(c) << " at " << i << "," << j;
      }
    for (int64_t i = 0; i < c.M; ++i)   // the padding columns of C are left alone
      for (int64_t j = c.N; j < ldc; ++j) ASSERT_EQ(C[size_t(i * ldc + j)], C0[size_t(i * ldc + j)]) << name(c);
  }
}

TEST(SgemmAvx512, RepeatedCallsAreBitwiseEqual) {
  if (!sgemm_avx512_available()) GTEST_SKIP() << "no AVX-512F on this CPU";
  const std::vector<float> A = values(200 * 700, 4), B = values(700 * 300, 5);
  std::vector<float> C1(200 * 300), C2(200 * 300);
  sgemm_avx512(false, false, 200, 300, 700, A.data(), 700, B.data(), 300, 0.f, C1.data(), 300);
  sgemm_avx512(false, false, 200, 300, 700, A.data(), 700, B.data(), 300, 0.f, C2.data(), 300);
  EXPECT_TRUE(C1 == C2);
}
