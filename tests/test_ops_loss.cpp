// test_ops_loss.cpp — nll_loss, cross_entropy, count_correct, pixel_cross_entropy:
// float64 gradchecks, values and numerical stability (large logits), ignore_index rows /
// pixels (all ignored -> NaN), target validation (range, shape, dtype; not on meta), the
// argmax tie rule of count_correct, and the pixel loss against the row loss on the same
// data.
// ctest tier: ops
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/loss.h"
#include "engine/ops/softmax.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(Loss, NllAndCrossEntropyGradchecks) {
  Tensor t = Tensor::from_vector_i64({2, 0, 4, 1}, {4});
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return nll_loss(in[0], t); },
                        {leaf(random_f64({4, 5}, -3, 0, 8))}));
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return cross_entropy(in[0], t); },
                        {leaf(random_f64({4, 5}, -2, 2, 9))}));
}

TEST(Loss, CrossEntropyValueAndStability) {
  Tensor x = leaf(Tensor::from_vector({1, 2, 3, 0.5, -1, 2}, {2, 3}, DType::f64));
  Tensor t = Tensor::from_vector_i64({0, 2}, {2});
  double l0 = -(1 - std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
  double l1 = -(2 - std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(2.0)));
  Tensor loss = cross_entropy(x, t);
  EXPECT_EQ(loss.dim(), 0);
  EXPECT_NEAR(loss.item(), (l0 + l1) / 2, 1e-12);

  for (DType dt : {DType::f32, DType::f64}) {
    Tensor big = leaf(Tensor::from_vector({1000, -1000, -1000, 1000}, {2, 2}, dt));
    Tensor tt = Tensor::from_vector_i64({0, 0}, {2});
    Tensor l = cross_entropy(big, tt);
    EXPECT_NEAR(l.item(), 1000.0, 1e-3);   // row 0: 0, row 1: 2000
    l.backward();
    std::vector<double> g = big.grad().to_vector();
    for (double v : g) EXPECT_TRUE(std::isfinite(v));
    EXPECT_NEAR(g[0], 0.0, 1e-6);
    EXPECT_NEAR(g[2], -0.5, 1e-6);
    EXPECT_NEAR(g[3], 0.5, 1e-6);
    std::vector<double> s = softmax(big).to_vector();
    EXPECT_NEAR(s[0], 1.0, 1e-6);
    EXPECT_NEAR(s[1], 0.0, 1e-6);
  }
}

TEST(Loss, IgnoreIndex) {
  Tensor x = leaf(random_f64({3, 4}, -1, 1, 10));
  Tensor t = Tensor::from_vector_i64({1, kNllIgnoreIndex, 3}, {3});
  Tensor lp = log_softmax(x.detach());
  std::vector<double> v = lp.to_vector();
  Tensor loss = nll_loss(lp, t);
  EXPECT_NEAR(loss.item(), -(v[1] + v[11]) / 2, 1e-12);
  Tensor lp2 = leaf(lp.clone().detach());
  nll_loss(lp2, t).backward();
  std::vector<double> g = lp2.grad().to_vector();
  for (int j = 0; j < 4; ++j) EXPECT_EQ(g[size_t(4 + j)], 0.0);
  EXPECT_EQ(g[1], -0.5);
  EXPECT_EQ(g[11], -0.5);
  EXPECT_TRUE(std::isnan(nll_loss(lp, Tensor::from_vector_i64({-100, -100, -100}, {3})).item()));
}

TEST(Loss, TargetErrors) {
  Tensor x = random_f64({3, 4});
  std::string msg = error_of([&] { cross_entropy(x, Tensor::from_vector_i64({1, 7, 0}, {3})); });
  EXPECT_NE(msg.find("target 7"), std::string::npos) << msg;
  EXPECT_THROW(nll_loss(x, Tensor::from_vector_i64({1, 4, 0}, {3})), ValueError);
  EXPECT_THROW(nll_loss(x, Tensor::from_vector_i64({-1, 0, 0}, {3})), ValueError);
  EXPECT_THROW(nll_loss(x, Tensor::from_vector_i64({1, 2}, {2})), ShapeError);
  EXPECT_THROW(nll_loss(x, Tensor::from_vector_i64({1, 2, 0}, {3, 1})), ShapeError);
  EXPECT_THROW(nll_loss(x, Tensor::from_vector({1, 2, 0}, {3})), DTypeError);
  EXPECT_THROW(nll_loss(Tensor::zeros({3}), Tensor::from_vector_i64({1, 2, 0}, {3})), ShapeError);
  msg = error_of([&] { cross_entropy(x, Tensor::from_vector_i64({1, 2}, {2})); });
  EXPECT_NE(msg.find("[2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 4]"), std::string::npos) << msg;
  // Range is not checked on meta (no data there).
  Tensor xm = Tensor::empty({3, 4}, DType::f32, meta_device());
  EXPECT_NO_THROW(cross_entropy(xm, Tensor::empty({3}, DType::i64, meta_device())));
}

TEST(Loss, CountCorrect) {
  Tensor x = Tensor::from_vector({0.1, 0.9, 0.0, 0.8, 0.1, 0.1, 0.3, 0.3, 0.2}, {3, 3});
  EXPECT_EQ(count_correct(x, Tensor::from_vector_i64({1, 0, 0}, {3})), 3);   // tie -> first index
  EXPECT_EQ(count_correct(x, Tensor::from_vector_i64({1, 1, 1}, {3})), 1);
  EXPECT_EQ(count_correct(x.transpose(0, 1), Tensor::from_vector_i64({1, 0, 0}, {3})), 2);  // strided
  EXPECT_EQ(count_correct(Tensor::empty({3, 3}, DType::f32, meta_device()),
                          Tensor::empty({3}, DType::i64, meta_device())), 0);
  // torch.argmax's order: NaN above every number (the first NaN), +-inf, signed zeros equal;
  // each row's argmax: 1, 0, 1, 0, 0; in every float type (the CPU kernel of each)
  const double nan = std::nan(""), inf = INFINITY;
  Tensor special = Tensor::from_vector({1, 3, 3, 0, nan, 2, nan, 5, -inf, inf, 7, inf, 0, -0.0, 0, 0,
                                        -inf, -inf, -inf, -inf}, {5, 4});
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    EXPECT_EQ(count_correct(special.to(t), Tensor::from_vector_i64({1, 0, 1, 0, 0}, {5})), 5) << dtype_name(t);
    EXPECT_EQ(count_correct(special.to(t), Tensor::from_vector_i64({3, 2, 3, 1, 3}, {5})), 0) << dtype_name(t);
  }
}

namespace {
// The same loss through the 2-D path: logits [N, C, H, W] -> [N*H*W, C] rows.
Tensor rows_cross_entropy(const Tensor& logits, const Tensor& target) {
  const int64_t C = logits.size(1);
  return cross_entropy(logits.permute({0, 2, 3, 1}).reshape({-1, C}), target.reshape({-1}));
}
Tensor pixel_target() {   // [2, 3, 2] with three ignored pixels
  return Tensor::from_vector_i64({0, 3, -100, 2, 1, 1, 3, -100, 0, 2, -100, 1}, {2, 3, 2});
}
}  // namespace

TEST(PixelCrossEntropy, MatchesRowCrossEntropy) {
  Tensor t = pixel_target();
  Tensor a = leaf(random_f64({2, 4, 3, 2}, -2, 2, 51));
  Tensor b = leaf(a.detach().clone());
  Tensor la = pixel_cross_entropy(a, t), lb = rows_cross_entropy(b, t);
  EXPECT_EQ(la.dim(), 0);
  EXPECT_NEAR(la.item(), lb.item(), 1e-14);
  la.backward();
  lb.backward();
  expect_near(a.grad().to_vector(), b.grad().to_vector(), 1e-15);
  // Ignored pixels get exactly zero gradient.
  std::vector<double> g = a.grad().to_vector();
  for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(g[size_t(c * 6 + 2)], 0.0);   // n=0, pixel (1, 0)
  // Hand-computed two-pixel case: mean of -log softmax at the targets.
  Tensor x = Tensor::from_vector({1, 0.5, 2, -1, 3, 2}, {1, 3, 1, 2}, DType::f64);
  Tensor tt = Tensor::from_vector_i64({0, 2}, {1, 1, 2});
  double l0 = -(1 - std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
  double l1 = -(2 - std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(2.0)));
  EXPECT_NEAR(pixel_cross_entropy(x, tt).item(), (l0 + l1) / 2, 1e-14);
  // All pixels ignored: NaN, as PyTorch.
  EXPECT_TRUE(std::isnan(pixel_cross_entropy(x, Tensor::from_vector_i64({-100, -100}, {1, 1, 2})).item()));
}

TEST(PixelCrossEntropy, GradcheckAndStability) {
  Tensor t = pixel_target();
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return pixel_cross_entropy(in[0], t); },
                        {leaf(random_f64({2, 4, 3, 2}, -2, 2, 52))}));
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor big = leaf(Tensor::from_vector({1000, -1000, -1000, 1000}, {1, 2, 1, 2}, dt));
    Tensor l = pixel_cross_entropy(big, Tensor::from_vector_i64({0, 0}, {1, 1, 2}));
    EXPECT_NEAR(l.item(), 1000.0, 1e-3);   // pixel 0: 0, pixel 1: 2000
    l.backward();
    expect_near(big.grad().to_vector(), {0, -0.5, 0, 0.5}, 1e-6);
  }
}

TEST(PixelCrossEntropy, TargetErrors) {
  Tensor x = random_f64({2, 4, 3, 2});
  std::string msg = error_of([&] { pixel_cross_entropy(x, Tensor::zeros({2, 3, 3}, DType::i64)); });
  EXPECT_TRUE(contains(msg, "[2, 3, 3]")) << msg;
  EXPECT_TRUE(contains(msg, "[2, 4, 3, 2]")) << msg;
  EXPECT_THROW(pixel_cross_entropy(x, Tensor::zeros({2, 3, 3}, DType::i64)), ShapeError);
  EXPECT_THROW(pixel_cross_entropy(x, Tensor::zeros({6, 2}, DType::i64)), ShapeError);
  EXPECT_THROW(pixel_cross_entropy(x, Tensor::zeros({2, 3, 2}, DType::f64)), DTypeError);
  EXPECT_THROW(pixel_cross_entropy(Tensor::zeros({2, 4}), Tensor::zeros({2}, DType::i64)), ShapeError);
  std::vector<int64_t> tv{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
  tv[9] = 4;   // n=1, h=1, w=1
  msg = error_of([&] { pixel_cross_entropy(x, Tensor::from_vector_i64(tv, {2, 3, 2})); });
  EXPECT_TRUE(contains(msg, "target 4")) << msg;
  EXPECT_TRUE(contains(msg, "[1, 1, 1]")) << msg;
  tv[9] = -1;
  EXPECT_THROW(pixel_cross_entropy(x, Tensor::from_vector_i64(tv, {2, 3, 2})), ValueError);
  // Range is not checked on meta (no data there).
  EXPECT_NO_THROW(pixel_cross_entropy(Tensor::empty({2, 4, 3, 2}, DType::f32, meta_device()),
                                      Tensor::empty({2, 3, 2}, DType::i64, meta_device())));
}
