// test_ops_attention.cpp — scaled_dot_product_attention: values against a naive softmax
// attention with padded keys, float64 gradchecks of q, k and v (with dropout through a
// reset generator; Tq != Tk, Dv != D and permuted inputs), eval mode ignoring dropout,
// and shape errors. Meta == cpu allocations of an attention block:
// test_ops_cross_family.cpp.
// ctest tier: ops
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/ops/attention.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
// Naive softmax(q k^T / sqrt(D) with padded keys at -inf) v, no dropout.
std::vector<double> naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int>& pad) {
  const int64_t B = q.size(0), NH = q.size(1), T = q.size(2), D = q.size(3), Tk = k.size(2), Dv = v.size(3);
  std::vector<double> Q = q.to_vector(), K = k.to_vector(), V = v.to_vector(), out(size_t(B * NH * T * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<size_t>(Tk));
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < Tk; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += Q[((b * NH + h) * T + i) * D + d] * K[((b * NH + h) * Tk + j) * D + d];
          s[j] = pad[b * Tk + j] ? -INFINITY : acc / std::sqrt(double(D));
          mx = std::max(mx, s[j]);
        }
        for (int64_t j = 0; j < Tk; ++j) z += s[j] = std::exp(s[j] - mx);
        for (int64_t j = 0; j < Tk; ++j)
          for (int64_t d = 0; d < Dv; ++d)
            out[((b * NH + h) * T + i) * Dv + d] += s[j] / z * V[((b * NH + h) * Tk + j) * Dv + d];
      }
  return out;
}
}  // namespace

TEST(Attention, ValuesAndGradcheck) {
  std::vector<int> pad = {0, 0, 0, 0, 0, 0, 1, 1};   // B=2, T=4: batch 1 pads 2 keys
  Tensor m = u8_mask({0, 0, 0, 0, 0, 0, 1, 1}, {2, 4});
  Tensor q = leaf(random_f64({2, 2, 4, 3}, -1, 1, 28)), k = leaf(random_f64({2, 2, 4, 3}, -1, 1, 29)),
         v = leaf(random_f64({2, 2, 4, 3}, -1, 1, 30));
  expect_near(scaled_dot_product_attention(q, k, v, m, 0.0, true).to_vector(), naive_attention(q, k, v, pad), 1e-12);
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], m, 0.0, true); },
      {q, k, v}));
  // dropout 0.1: the same mask on every call (generator reset inside the closure)
  {
    Generator gen{42, 0};
    std::vector<double> dropped = scaled_dot_product_attention(q, k, v, m, 0.1, true, gen).to_vector();
    EXPECT_EQ(gen.offset, uint64_t(2 * 2 * 4 * 4 / 4));   // one uniform per probability
    std::vector<double> plain = naive_attention(q, k, v, pad);
    size_t differ = 0;
    for (size_t i = 0; i < plain.size(); ++i) differ += std::fabs(dropped[i] - plain[i]) > 1e-9;
    EXPECT_GT(differ, 0u);   // some probabilities were dropped
  }
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) {
        Generator gen{42, 0};
        return scaled_dot_product_attention(in[0], in[1], in[2], m, 0.1, true, gen);
      },
      {q, k, v}));
  // Tq != Tk, Dv != D, permuted (non-contiguous) inputs as a model produces them
  Tensor q2 = leaf(random_f64({1, 3, 2, 2}, -1, 1, 31)), k2 = leaf(random_f64({1, 5, 2, 2}, -1, 1, 32)),
         v2 = leaf(random_f64({1, 5, 2, 3}, -1, 1, 33));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return scaled_dot_product_attention(in[0].permute({0, 2, 1, 3}), in[1].permute({0, 2, 1, 3}),
                                            in[2].permute({0, 2, 1, 3}), Tensor(), 0.0, false);
      },
      {q2, k2, v2}));
  // eval mode ignores dropout
  Generator g1{1, 0};
  expect_near(scaled_dot_product_attention(q, k, v, m, 0.5, false, g1).to_vector(), naive_attention(q, k, v, pad),
              1e-12);
  EXPECT_EQ(g1.offset, 0u);
  EXPECT_THROW(scaled_dot_product_attention(q, k, Tensor::zeros({2, 2, 3, 3}, DType::f64), m, 0.0, true), ShapeError);
}
