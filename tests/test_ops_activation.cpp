// test_ops_activation.cpp — relu, relu_, sigmoid, gelu: values, float64 gradchecks,
// in-place relu_ (history rebased, version bumped, leaf / saved-tensor errors), sigmoid's
// extremes and float32 accuracy over the whole range, gelu's erf and tanh forms and its
// float32 kernels against float64.
// ctest tier: ops
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/core/error.h"
#include "engine/ops/activation.h"
#include "engine/ops/elementwise.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
// Values in [-1, 1] pushed away from relu's kink at 0 (|v| >= 0.1).
Tensor away_from_zero(const Shape& shape, uint64_t seed) {
  std::vector<double> v = random_f64(shape, -1, 1, seed).to_vector();
  for (double& x : v) x = x < 0 ? x - 0.1 : x + 0.1;
  return Tensor::from_vector(v, shape, DType::f64);
}
}  // namespace

TEST(Relu, ValuesAndGradcheck) {
  Tensor x = Tensor::from_vector({-2, -0.5, 0.5, 3}, {4});
  EXPECT_EQ(relu(x).to_vector(), (std::vector<double>{0, 0, 0.5, 3}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return relu(in[0]); },
                        {leaf(away_from_zero({3, 5}, 1))}));
}

TEST(Relu, InPlaceGradcheckThroughPrecedingOp) {
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) {
                          Tensor h = scale(in[0], 1.0);
                          return relu_(h);
                        },
                        {leaf(away_from_zero({4, 3}, 2))}));
}

TEST(Relu, InPlaceRebasesHistoryAndBumpsVersion) {
  Tensor x = leaf(Tensor::from_vector({-1, 2, -3, 4}, {4}, DType::f64));
  Tensor h = scale(x, 2.0);
  std::shared_ptr<Node> old_fn = h.grad_fn();
  TensorImpl* impl = h.impl();
  uint64_t v0 = h.version();
  Tensor r = relu_(h);
  EXPECT_EQ(r.impl(), impl);              // same tensor, modified in place
  EXPECT_EQ(h.version(), v0 + 1);
  EXPECT_EQ(h.to_vector(), (std::vector<double>{0, 4, 0, 8}));
  ASSERT_TRUE(h.grad_fn());
  EXPECT_STREQ(h.grad_fn()->op, "relu_");
  ASSERT_EQ(h.grad_fn()->next.size(), 1u);
  EXPECT_EQ(h.grad_fn()->next[0].node, old_fn);
  sum_all(h).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{0, 2, 0, 2}));
}

TEST(Relu, InPlaceErrors) {
  Tensor x = leaf(Tensor::from_vector({-1, 2}, {2}, DType::f64));
  std::string msg = error_of([&] { relu_(x); });
  EXPECT_NE(msg.find("a leaf Variable that requires grad"), std::string::npos) << msg;
  EXPECT_THROW(relu_(x), AutogradError);
  EXPECT_EQ(x.to_vector(), (std::vector<double>{-1, 2}));   // untouched
  {
    NoGradGuard g;   // allowed without grad mode (as optimizers do)
    relu_(x);
  }
  EXPECT_EQ(x.to_vector(), (std::vector<double>{0, 2}));

  // A tensor saved by an earlier op, then modified by relu_, fails in backward.
  Tensor a = leaf(Tensor::from_vector({-1, 2, 3}, {3}, DType::f64));
  Tensor h = scale(a, 1.0);
  Tensor m = mul(h, h);   // saves h
  relu_(h);
  Tensor loss = add(sum_all(m), sum_all(h));
  msg = error_of([&] { loss.backward(); });
  EXPECT_NE(msg.find("modified by an inplace operation"), std::string::npos) << msg;
  Tensor b = leaf(Tensor::from_vector({1, 2}, {2}, DType::f64));
  Tensor hb = scale(b, 1.0);
  Tensor mb = mul(hb, hb);
  relu_(hb);
  EXPECT_THROW(sum_all(mb).backward(), AutogradError);
}

TEST(Sigmoid, ValuesGradcheckAndExtremes) {
  Tensor x = Tensor::from_vector({0, 1, -2, 1000, -1000}, {5}, DType::f64);
  std::vector<double> y = sigmoid(x).to_vector();
  EXPECT_EQ(y[0], 0.5);
  EXPECT_NEAR(y[1], 1 / (1 + std::exp(-1.0)), 1e-15);
  EXPECT_NEAR(y[2], 1 / (1 + std::exp(2.0)), 1e-15);
  EXPECT_EQ(y[3], 1.0);
  EXPECT_EQ(y[4], 0.0);
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return sigmoid(in[0]); },
                        {leaf(random_f64({3, 4, 2}, -4, 4, 41))}));
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor big = leaf(Tensor::from_vector({-1000, 1000, 0}, {3}, dt));
    sigmoid(big).backward(Tensor::ones({3}, dt));
    EXPECT_EQ(big.grad().to_vector(), (std::vector<double>{0, 0, 0.25}));
  }
}

TEST(Sigmoid, Float32Accuracy) {
  // float sigmoid (vectorised exp) within a few ulp of the exact value, over the whole
  // range including exp's overflow / underflow edges (subnormal results may be flushed to
  // zero); NaN and inf behave.
  std::vector<double> xs;
  for (int i = -20000; i <= 20000; ++i) xs.push_back(i * 0.0053);
  for (double v : {-104.5, -104.0, -103.9, -89.0, -88.73, -88.72, -87.4, -87.3, 87.3, 88.72, 88.73, 89.0, 104.0})
    xs.push_back(v);
  std::vector<double> y = sigmoid(Tensor::from_vector(xs, {int64_t(xs.size())}, DType::f32)).to_vector();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double xf = double(float(xs[i]));
    if (std::exp(-xf) > double(FLT_MAX)) { EXPECT_EQ(y[i], 0.0) << "x = " << xf; continue; }   // exp overflows
    const double ref = 1.0 / (1.0 + std::exp(-xf));
    const double ulp = std::max(std::fabs(ref) * 0x1p-23, 0x1p-149);
    if (ref < double(FLT_MIN)) {   // the CPU backend flushes subnormal results to zero (test_cpu_backend)
      EXPECT_TRUE(y[i] == 0.0 || std::fabs(y[i] - ref) <= 4 * ulp) << "x = " << xf;
      continue;
    }
    EXPECT_LE(std::fabs(y[i] - ref), 4 * ulp) << "x = " << xf;
  }
  std::vector<double> s = sigmoid(Tensor::from_vector({NAN, INFINITY, -INFINITY}, {3}, DType::f32)).to_vector();
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_EQ(s[1], 1.0);
  EXPECT_EQ(s[2], 0.0);
}

TEST(Gelu, ValuesAndGradcheck) {
  Tensor x = Tensor::from_vector({1.0, -1.0, 0.0, 3.0}, {4}, DType::f64);
  std::vector<double> e = gelu(x).to_vector(), t = gelu(x, "tanh").to_vector();
  EXPECT_NEAR(e[0], 0.8413447, 1e-7);
  EXPECT_NEAR(t[0], 0.8411920, 1e-7);
  EXPECT_NEAR(e[1], -0.1586553, 1e-7);
  EXPECT_EQ(e[2], 0.0);
  EXPECT_NEAR(e[3], 2.9959503, 1e-7);   // 3 * Phi(3)
  EXPECT_NEAR(gelu(Tensor::from_vector({1.0}, {1})).to_vector()[0], 0.8413447, 1e-6);   // float32
  for (const char* mode : {"none", "tanh"})
    EXPECT_TRUE(gradcheck([mode](const std::vector<Tensor>& in) { return gelu(in[0], mode); },
                          {leaf(random_f64({3, 7}, -3, 3, 15))}))
        << mode;
  EXPECT_THROW(gelu(x, "sigmoid"), ValueError);
}

TEST(Gelu, Float32MatchesFloat64) {
  // float32 uses vectorised exp / erf approximations: compare values and gradients over
  // a wide range (both tails included) with float64 (std::erf / std::exp).
  std::vector<double> xv;
  for (double v = -12; v <= 12; v += 0.01) xv.push_back(v);
  const Shape s{int64_t(xv.size())};
  for (const char* mode : {"none", "tanh"}) {
    Tensor x64 = leaf(Tensor::from_vector(xv, s, DType::f64)), x32 = leaf(Tensor::from_vector(xv, s, DType::f32));
    Tensor y64 = gelu(x64, mode), y32 = gelu(x32, mode);
    y64.backward(Tensor::ones(s, DType::f64));
    y32.backward(Tensor::ones(s, DType::f32));
    std::vector<double> a = y64.to_vector(), b = y32.to_vector(), ga = x64.grad().to_vector(),
                        gb = x32.grad().to_vector();
    for (size_t i = 0; i < xv.size(); ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-6 * std::max(1.0, std::fabs(xv[i]))) << mode << " x=" << xv[i];
      EXPECT_NEAR(ga[i], gb[i], 2e-6) << mode << " x=" << xv[i];
    }
  }
}

// silu, hardswish, hardsigmoid (torchvision's EfficientNet / MobileNetV3): values at
// PyTorch's reference points, float64 gradchecks away from the kinks, float32 against float64.
TEST(InputSavingActivations, ValuesAndGradients) {
  const Tensor x = Tensor::from_vector({-4.0, -3.0, -1.0, 0.0, 1.5, 3.0, 5.0}, {7}, DType::f64);
  const std::vector<double> hs = hardswish(x).to_vector(), hg = hardsigmoid(x).to_vector(), si = silu(x).to_vector();
  const std::vector<double> want_hs = {0.0, 0.0, -1.0 / 3.0, 0.0, 1.5 * 4.5 / 6.0, 3.0, 5.0};
  const std::vector<double> want_hg = {0.0, 0.0, 2.0 / 6.0, 0.5, 4.5 / 6.0, 1.0, 1.0};
  for (size_t i = 0; i < 7; ++i) {
    const double v = x.to_vector()[i];
    EXPECT_NEAR(hs[i], want_hs[i], 1e-15) << v;
    EXPECT_NEAR(hg[i], want_hg[i], 1e-15) << v;
    EXPECT_NEAR(si[i], v / (1.0 + std::exp(-v)), 1e-15) << v;
  }
  // inputs avoiding the kinks at +-3 by more than the finite-difference step
  const Tensor in = leaf(Tensor::from_vector({-4.5, -2.9, -1.0, -0.2, 0.7, 2.5, 2.99, 3.5}, {8}, DType::f64));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& v) { return silu(v[0]); }, {leaf(random_f64({3, 5}, -6, 6, 9))}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& v) { return hardswish(v[0]); }, {in}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& v) { return hardsigmoid(v[0]); }, {in}));
  const Tensor x32 = Tensor::uniform({257}, -8, 8, DType::f32);
  const Tensor x64 = x32.to(DType::f64);
  for (auto f : {&silu, &hardswish, &hardsigmoid}) {
    const std::vector<double> a = f(x32).to_vector(), b = f(x64).to_vector();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 2e-6 * (1 + std::fabs(b[i])));
  }
}
