// test_ops_pool.cpp — max_pool2d, avg_pool2d, adaptive_avg_pool2d: forward values (ties,
// padding counted by avg, uneven adaptive bins), float64 gradchecks, and shape / value
// errors. Thread-count and meta-device checks with batch_norm: test_ops_cross_family.cpp.
// ctest tier: ops
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/pool.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(Pool, MaxPoolForwardValuesAndTies) {
  Tensor x = Tensor::from_vector({1, 5, 2, 0,   //
                                  3, 4, 7, 7,   //
                                  0, 9, 1, 1,   //
                                  8, 2, 1, 1},
                                 {1, 1, 4, 4});
  Tensor y = max_pool2d(x, {2, 2, 2, 2});
  expect_near(y.to_vector(), {5, 7, 9, 1});
  // backward routes each gradient to the first maximum (ties: 7,7 and 1,1,1,1)
  Tensor xl = leaf(x.to(DType::f64));
  max_pool2d(xl, {2, 2, 2, 2}).backward(Tensor::from_vector({1, 2, 3, 4}, {1, 1, 2, 2}, DType::f64));
  expect_near(xl.grad().to_vector(), {0, 1, 0, 0, 0, 0, 2, 0, 0, 3, 4, 0, 0, 0, 0, 0});
  // kernel 3 stride 2 pad 1 on 3x3: padding never wins
  Tensor z = Tensor::from_vector({-1, -2, -3, -4, -5, -6, -7, -8, -9}, {1, 1, 3, 3});
  expect_near(max_pool2d(z, {3, 3, 2, 2, 1, 1}).to_vector(), {-1, -2, -4, -5});
  // one column wide, kernel 3 pad 1: windows clipped on both sides, never read past the plane
  Tensor col = Tensor::from_vector({1, 2, 3, 100, 200, 300}, {1, 2, 3, 1});
  expect_near(max_pool2d(col, {3, 3, 1, 1, 1, 1}).to_vector(), {2, 3, 3, 200, 300, 300});
  expect_near(max_pool2d(col.reshape({1, 2, 1, 3}), {3, 3, 1, 1, 1, 1}).to_vector(),
              {2, 3, 3, 200, 300, 300});
}

TEST(Pool, AvgPoolCountsPadding) {
  Tensor x = Tensor::ones({1, 1, 2, 2});
  expect_near(avg_pool2d(x, {2, 2, 2, 2, 1, 1}).to_vector(), {0.25, 0.25, 0.25, 0.25});
  Tensor v = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  expect_near(avg_pool2d(v, {2, 2, 1, 1}).to_vector(), {3, 4, 6, 7});
  // 3x3 stride 2 pad 1: corner windows hold 4 real values, divisor 9
  expect_near(avg_pool2d(v, {3, 3, 2, 2, 1, 1}).to_vector(), {12.0 / 9, 16.0 / 9, 24.0 / 9, 28.0 / 9});
}

TEST(Pool, AdaptiveAvgPoolUnevenBins) {
  Tensor x = Tensor::from_vector({1, 2, 3, 4, 5}, {1, 1, 1, 5});
  // bins [0,2), [1,4), [3,5)
  expect_near(adaptive_avg_pool2d(x, 1, 3).to_vector(), {1.5, 3, 4.5});
  Tensor g = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {1, 3, 2, 2});
  expect_near(adaptive_avg_pool2d(g, 1, 1).to_vector(), {2.5, 6.5, 10.5});
}

TEST(Pool, GradcheckMaxPool) {
  auto k2 = [](const std::vector<Tensor>& in) { return max_pool2d(in[0], {2, 2, 2, 2}); };
  EXPECT_TRUE(gradcheck(k2, {leaf(random_f64({2, 2, 4, 4}, -1, 1, 40))}));
  auto k3 = [](const std::vector<Tensor>& in) { return max_pool2d(in[0], {3, 3, 2, 2, 1, 1}); };
  EXPECT_TRUE(gradcheck(k3, {leaf(random_f64({1, 2, 5, 5}, -1, 1, 41))}));
  EXPECT_TRUE(gradcheck(k3, {leaf(random_f64({2, 1, 6, 7}, -1, 1, 42))}));
}

TEST(Pool, GradcheckAvgPool) {
  auto k2 = [](const std::vector<Tensor>& in) { return avg_pool2d(in[0], {2, 2, 2, 2}); };
  EXPECT_TRUE(gradcheck(k2, {leaf(random_f64({2, 2, 4, 5}, -1, 1, 50))}));
  auto k3 = [](const std::vector<Tensor>& in) { return avg_pool2d(in[0], {3, 3, 2, 2, 1, 1}); };
  EXPECT_TRUE(gradcheck(k3, {leaf(random_f64({1, 2, 5, 6}, -1, 1, 51))}));
}

TEST(Pool, GradcheckAdaptiveAvgPool) {
  auto to1 = [](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], 1, 1); };
  EXPECT_TRUE(gradcheck(to1, {leaf(random_f64({2, 2, 7, 7}, -1, 1, 60))}));
  auto to3 = [](const std::vector<Tensor>& in) { return adaptive_avg_pool2d(in[0], 3, 3); };
  EXPECT_TRUE(gradcheck(to3, {leaf(random_f64({1, 2, 5, 5}, -1, 1, 61))}));
}

TEST(Pool, Errors) {
  Tensor x = Tensor::zeros({1, 1, 2, 2});
  std::string msg = error_of([&] { max_pool2d(x, {5, 5, 1, 1}); });
  EXPECT_NE(msg.find("max_pool2d"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1, 1, 2, 2]"), std::string::npos) << msg;
  EXPECT_THROW(max_pool2d(x, {5, 5, 1, 1}), ShapeError);
  msg = error_of([&] { avg_pool2d(x, {5, 5, 1, 1, 1, 1}); });
  EXPECT_NE(msg.find("avg_pool2d"), std::string::npos) << msg;
  EXPECT_THROW(avg_pool2d(x, {5, 5, 1, 1, 1, 1}), ShapeError);
  EXPECT_THROW(max_pool2d(x, {2, 2, 1, 1, 2, 2}), ValueError);   // pad > kernel/2
  EXPECT_THROW(max_pool2d(x, {2, 2, 0, 1}), ValueError);
  EXPECT_THROW(max_pool2d(Tensor::zeros({2, 2}), {1, 1, 1, 1}), ShapeError);
  EXPECT_THROW(adaptive_avg_pool2d(x, 0, 1), ValueError);
}
