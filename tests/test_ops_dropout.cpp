// test_ops_dropout.cpp — dropout: identity cases (eval, p = 0) and p = 1, same seed ->
// same mask and a float64 gradcheck with a fixed mask, the mask against the Philox
// contract element by element, the kernels' batched Philox (philox_cpu.h) against
// Generator::block, and the keep fraction and its independence of the
// thread count.
// ctest tier: ops
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "kernels/cpu/philox_cpu.h"
#include "tests/gradcheck.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(Dropout, IdentityCasesAndZeros) {
  Tensor x = leaf(random_f64({8, 4}, -1, 1, 3));
  Generator gen{5, 0};
  EXPECT_EQ(dropout(x, 0.5, false, gen).impl(), x.impl());
  EXPECT_EQ(dropout(x, 0.0, true, gen).impl(), x.impl());
  EXPECT_EQ(gen.offset, 0u);
  Tensor z = dropout(x, 1.0, true, gen);
  for (double v : z.to_vector()) EXPECT_EQ(v, 0.0);
  sum_all(z).backward();
  for (double v : x.grad().to_vector()) EXPECT_EQ(v, 0.0);
  EXPECT_THROW(dropout(x, 1.5, true, gen), ValueError);
  EXPECT_THROW(dropout(x, -0.1, true, gen), ValueError);
}

TEST(Dropout, SameSeedSameMaskAndGradcheck) {
  Tensor x = random_f64({6, 7}, 0.5, 1.5, 4);
  Generator g1{11, 3}, g2{11, 3};
  std::vector<double> a = dropout(x, 0.4, true, g1).to_vector();
  EXPECT_EQ(a, dropout(x, 0.4, true, g2).to_vector());
  EXPECT_EQ(g1.offset, 3u + (42 + 3) / 4);   // ceil(n/4) blocks reserved
  EXPECT_NE(a, dropout(x, 0.4, true, g1).to_vector());   // next call: new mask
  std::vector<double> xv = x.to_vector();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(a[i] == 0.0 || std::fabs(a[i] - xv[i] / 0.6) < 1e-12) << i;

  Generator gen{99, 0};
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) {
                          gen.offset = 0;   // identical mask on every evaluation
                          return dropout(in[0], 0.3, true, gen);
                        },
                        {leaf(random_f64({5, 6}, -1, 1, 5))}));
}

TEST(Dropout, MaskMatchesPhiloxContract) {
  const int64_t n = 10;
  Tensor x = Tensor::ones({n}, DType::f64);
  Generator gen{1234, 17};
  std::vector<double> y = dropout(x, 0.5, true, gen).to_vector();
  for (int64_t i = 0; i < n; ++i) {
    float u = uint_to_unit_float(Generator::block(1234, 17, uint64_t(i / 4))[size_t(i % 4)]);
    EXPECT_EQ(y[size_t(i)], u >= 0.5f ? 2.0 : 0.0) << i;
  }
}

TEST(Dropout, BatchedPhiloxEqualsTheReferenceBlocks) {
  struct Case { uint64_t seed, first; int64_t nb; };
  const Case cases[] = {{0, 0, 64}, {1234, 17, 1}, {7, 1000, 7}, {7, 1000, 9}, {0xFFFFFFFFFFFFull, 3, 63},
                        {99, 0xFFFFFFF0ull, 64}, {5, 0xFFFFFFFFFFFFFFFAull, 12}};   // counters that carry
  for (const Case& c : cases) {
    uint32_t words[4 * kPhiloxBatch] = {}, portable[4 * kPhiloxBatch] = {};
    philox_words(c.seed, c.first, c.nb, words);   // AVX2 in the x86-64-v3 build
    philox_detail::philox_words_portable(c.seed, c.first, c.nb, portable);
    for (int64_t b = 0; b < c.nb; ++b) {
      const auto ref = Generator::block(c.seed, 0, c.first + uint64_t(b));
      for (int k = 0; k < 4; ++k) {
        EXPECT_EQ(words[4 * b + k], ref[size_t(k)]) << c.seed << " " << c.first << " " << b << " " << k;
        EXPECT_EQ(portable[4 * b + k], ref[size_t(k)]) << c.seed << " " << c.first << " " << b << " " << k;
      }
    }
    for (int64_t e = 4 * c.nb; e < 4 * kPhiloxBatch; ++e) EXPECT_EQ(words[e], 0u) << "wrote past nb blocks";
  }
}

TEST(Dropout, KeepFractionAndThreadIndependence) {
  const int64_t n = 400000;
  const double p = 0.3;
  Tensor x = Tensor::ones({n}, DType::f32);
  int prev = omp_get_max_threads();
  omp_set_num_threads(1);
  Generator g1{7, 0};
  std::vector<double> y1 = dropout(x, p, true, g1).to_vector();
  omp_set_num_threads(2);
  Generator g2{7, 0};
  std::vector<double> y2 = dropout(x, p, true, g2).to_vector();
  omp_set_num_threads(prev);
  EXPECT_EQ(y1, y2);
  int64_t kept = 0;
  for (double v : y1) {
    if (v != 0.0) { ++kept; EXPECT_FLOAT_EQ(float(v), float(1.0 / (1.0 - p))); }
  }
  EXPECT_NEAR(double(kept) / double(n), 1.0 - p, 0.01);
}
