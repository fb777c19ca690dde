// test_ops_layernorm.cpp — layer_norm: values against hand computations, float64
// gradchecks (x, weight and bias; only the affine parameters; no affine; a non-contiguous
// input), and shape errors.
// Thread-count independence of its column reductions: test_ops_cross_family.cpp.
// ctest tier: ops
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/layernorm.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(LayerNorm, Values) {
  Tensor x = Tensor::from_vector({1, 2, 3, 4, -1, -1, 1, 1}, {2, 4}, DType::f64);
  Tensor w = Tensor::from_vector({1, 2, 1, 1}, {4}, DType::f64);
  Tensor b = Tensor::from_vector({0, 0, 1, 0}, {4}, DType::f64);
  // row 0: mean 2.5, var 1.25; row 1: mean 0, var 1
  const double s = 1.0 / std::sqrt(1.25 + 1e-5);
  expect_near(layer_norm(x, w, b, 1e-5).to_vector(),
              {-1.5 * s, -0.5 * s * 2, 0.5 * s + 1, 1.5 * s, -1 / std::sqrt(1 + 1e-5) * 1,
               -2 / std::sqrt(1 + 1e-5), 1 / std::sqrt(1 + 1e-5) + 1, 1 / std::sqrt(1 + 1e-5)},
              1e-12);
  Tensor xf = Tensor::from_vector({1, 2, 3, 4}, {1, 4});
  expect_near(layer_norm(xf, Tensor(), Tensor()).to_vector(), {-1.3416408, -0.4472136, 0.4472136, 1.3416408}, 1e-6);
}

TEST(LayerNorm, Gradcheck) {
  auto f = [](const std::vector<Tensor>& in) { return layer_norm(in[0], in[1], in[2], 1e-5); };
  EXPECT_TRUE(gradcheck(f, {leaf(random_f64({2, 3, 8}, -1, 1, 5)), leaf(random_f64({8}, 0.5, 1.5, 6)),
                            leaf(random_f64({8}, -1, 1, 7))}));
  // only the affine parameters; no affine at all
  EXPECT_TRUE(gradcheck(f, {random_f64({4, 5}, -1, 1, 8), leaf(random_f64({5}, -1, 1, 9)),
                            leaf(random_f64({5}, -1, 1, 10))}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0], Tensor(), Tensor()); },
                        {leaf(random_f64({3, 6}, -1, 1, 11))}));
  // non-contiguous input
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return layer_norm(in[0].transpose(0, 1), in[1], in[2]); },
                        {leaf(random_f64({6, 3}, -1, 1, 12)), leaf(random_f64({6}, -1, 1, 13)),
                         leaf(random_f64({6}, -1, 1, 14))}));
}

TEST(LayerNorm, ShapeErrors) {
  Tensor x = Tensor::zeros({2, 3, 8});
  std::string m = error_of<ShapeError>([&] { layer_norm(x, Tensor::ones({7}), Tensor::zeros({8})); });
  EXPECT_TRUE(contains(m, "[7]") && contains(m, "[2, 3, 8]") && contains(m, "weight")) << m;
  m = error_of<ShapeError>([&] { layer_norm(x, Tensor::ones({8}), Tensor::zeros({2, 4})); });
  EXPECT_TRUE(contains(m, "[2, 4]") && contains(m, "bias")) << m;
}
