// test_ops_softmax.cpp — softmax, log_softmax, masked_softmax: values against hand
// computations (padded keys, fully padded rows -> zeros, scale, no mask = softmax),
// float64 gradchecks, float32 against float64, and shape / dtype errors.
// ctest tier: ops
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/softmax.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(Softmax, ValuesAndGradchecks) {
  Tensor x = Tensor::from_vector({1, 2, 3, 0, 0, 0}, {2, 3}, DType::f64);
  std::vector<double> s = softmax(x).to_vector(), ls = log_softmax(x).to_vector();
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(s[0], std::exp(1.0) / z, 1e-12);
  EXPECT_NEAR(s[4], 1.0 / 3, 1e-12);
  EXPECT_NEAR(ls[2], 3.0 - std::log(z), 1e-12);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return softmax(in[0]); },
                        {leaf(random_f64({4, 5}, -2, 2, 6))}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return log_softmax(in[0]); },
                        {leaf(random_f64({4, 5}, -2, 2, 7))}));
  EXPECT_THROW(softmax(Tensor::zeros({2, 3, 4})), ShapeError);
}

TEST(MaskedSoftmax, Values) {
  // [B=2, H=1, T=2, T=3]; batch 1 pads key 2; batch 0 no padding
  Tensor x = Tensor::from_vector({0, 0, 0, 1, 2, 3, 0, std::log(3.0), 100, 5, 5, -1}, {2, 1, 2, 3}, DType::f64);
  Tensor m = u8_mask({0, 0, 0, 0, 0, 1}, {2, 3});
  std::vector<double> y = masked_softmax(x, m).to_vector();
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), z = 1 + e1 + e2;
  expect_near(y, {1.0 / 3, 1.0 / 3, 1.0 / 3, 1 / z, e1 / z, e2 / z, 0.25, 0.75, 0, 0.5, 0.5, 0}, 1e-12);
  // scale; fully padded rows give zeros
  Tensor all = u8_mask({0, 0, 0, 1, 1, 1}, {2, 3});
  y = masked_softmax(x, all, 2.0).to_vector();
  const double z2 = 1 + std::exp(2.0) + std::exp(4.0);
  expect_near(y, {1.0 / 3, 1.0 / 3, 1.0 / 3, 1 / z2, std::exp(2.0) / z2, std::exp(4.0) / z2, 0, 0, 0, 0, 0, 0}, 1e-12);
  // no mask on a 2-D input = softmax
  Tensor r = random_f64({3, 5}, -2, 2, 24);
  expect_near(masked_softmax(r, Tensor()).to_vector(), softmax(r).to_vector(), 1e-15);
}

TEST(MaskedSoftmax, Float32MatchesFloat64) {
  Tensor x = random_f64({3, 2, 4, 37}, -30, 30, 41);
  std::vector<double> mv(3 * 37, 0.0);
  for (int j = 30; j < 37; ++j) mv[37 + j] = 1;   // batch 1 pads 7 keys
  for (int j = 0; j < 37; ++j) mv[2 * 37 + j] = 1;  // batch 2 fully padded
  Tensor m = u8_mask(mv, {3, 37});
  expect_near(masked_softmax(x.to(DType::f32), m, 0.3).to_vector(), masked_softmax(x, m, 0.3).to_vector(), 1e-6);
}

TEST(MaskedSoftmax, Gradcheck) {
  // B=2, H=2, T=5: batch 1 pads the last 2 keys
  Tensor m = u8_mask({0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, {2, 5});
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return masked_softmax(in[0], m, 0.7); },
                        {leaf(random_f64({2, 2, 5, 5}, -2, 2, 25))}));
  Tensor all = u8_mask({1, 1, 1, 0, 1, 0}, {2, 3});   // batch 0 fully padded
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return masked_softmax(in[0], all); },
                        {leaf(random_f64({2, 1, 2, 3}, -2, 2, 26))}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return masked_softmax(in[0], Tensor(), 1.5); },
                        {leaf(random_f64({4, 3}, -2, 2, 27))}));
}

TEST(MaskedSoftmax, Errors) {
  std::string msg = error_of<ShapeError>([] {
    masked_softmax(Tensor::zeros({2, 1, 3, 3}), u8_mask({0, 0, 0, 0}, {2, 2}));
  });
  EXPECT_TRUE(contains(msg, "[2, 2]") && contains(msg, "[2, 1, 3, 3]")) << msg;
  EXPECT_THROW(masked_softmax(Tensor::zeros({2, 1, 3, 3}), Tensor::zeros({2, 3})), DTypeError);
}
