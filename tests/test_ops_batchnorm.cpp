// test_ops_batchnorm.cpp — batch_norm: hand-computed forward values, running-stat updates
// over training and eval steps, float64 gradchecks (training / eval, NCHW and [N, C],
// partial gradients, no affine, bias only), float32 against float64, and shape / dtype /
// value errors. Thread-count and meta-device checks with the pools:
// test_ops_cross_family.cpp.
// ctest tier: ops
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/batchnorm.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(BatchNorm, TrainingForwardValues2d) {
  Tensor x = Tensor::from_vector({1, 2, 3, 6}, {2, 2});   // channel 0: {1,3}, channel 1: {2,6}
  Tensor w = Tensor::from_vector({2, 0.5}, {2}), b = Tensor::from_vector({1, -1}, {2});
  Tensor rm = Tensor::zeros({2}), rv = Tensor::ones({2});
  Tensor y = batch_norm(x, w, b, rm, rv, true);
  const double s0 = 1 / std::sqrt(1 + 1e-5), s1 = 1 / std::sqrt(4 + 1e-5);
  expect_near(y.to_vector(), {1 - 2 * s0, -1 - 0.5 * 2 * s1, 1 + 2 * s0, -1 + 0.5 * 2 * s1});
  // unbiased variance in the running stats: channel 0 var 2, channel 1 var 8
  expect_near(rm.to_vector(), {0.2, 0.4});
  expect_near(rv.to_vector(), {0.9 + 0.2, 0.9 + 0.8});
}

TEST(BatchNorm, RunningStatsAfterTwoStepsThenEval) {
  Tensor rm = Tensor::zeros({1}, DType::f64), rv = Tensor::ones({1}, DType::f64);
  const uint64_t v0 = rm.version(), w0 = rv.version();
  Tensor x1 = Tensor::from_vector({1, 2, 3, 4}, {4, 1, 1, 1}, DType::f64);
  Tensor x2 = Tensor::from_vector({0, 0, 4, 4}, {2, 1, 1, 2}, DType::f64);
  batch_norm(x1, Tensor(), Tensor(), rm, rv, true);
  // step 1: mean 2.5, unbiased var 5/3
  expect_near(rm.to_vector(), {0.25}, 1e-12);
  expect_near(rv.to_vector(), {0.9 + 0.1 * 5.0 / 3.0}, 1e-12);
  batch_norm(x2, Tensor(), Tensor(), rm, rv, true, 0.1);
  // step 2: mean 2, unbiased var 16/3
  const double rm2 = 0.9 * 0.25 + 0.1 * 2.0, rv2 = 0.9 * (0.9 + 0.1 * 5.0 / 3.0) + 0.1 * 16.0 / 3.0;
  expect_near(rm.to_vector(), {rm2}, 1e-12);
  expect_near(rv.to_vector(), {rv2}, 1e-12);
  EXPECT_EQ(rm.version(), v0 + 2);
  EXPECT_EQ(rv.version(), w0 + 2);
  EXPECT_FALSE(rm.requires_grad());
  // eval uses the running stats and leaves them alone
  Tensor y = batch_norm(x1, Tensor(), Tensor(), rm, rv, false);
  std::vector<double> want;
  for (double v : {1.0, 2.0, 3.0, 4.0}) want.push_back((v - rm2) / std::sqrt(rv2 + 1e-5));
  expect_near(y.to_vector(), want, 1e-12);
  EXPECT_EQ(rm.version(), v0 + 2);
  expect_near(rm.to_vector(), {rm2}, 1e-12);
}

TEST(BatchNorm, TrainingWithoutRunningStats) {
  Tensor none_m, none_v;
  Tensor x = Tensor::from_vector({1, 3}, {2, 1});
  expect_near(batch_norm(x, Tensor(), Tensor(), none_m, none_v, true).to_vector(),
              {-1 / std::sqrt(1 + 1e-5), 1 / std::sqrt(1 + 1e-5)});
  EXPECT_THROW(batch_norm(x, Tensor(), Tensor(), none_m, none_v, false), ValueError);
}

TEST(BatchNorm, GradcheckTraining2d) {
  Tensor rm = Tensor::zeros({3}, DType::f64), rv = Tensor::ones({3}, DType::f64);
  auto f = [&](const std::vector<Tensor>& in) { return batch_norm(in[0], in[1], in[2], rm, rv, true); };
  EXPECT_TRUE(gradcheck(f, {leaf(random_f64({5, 3}, -1, 1, 1)), leaf(random_f64({3}, 0.5, 1.5, 2)),
                            leaf(random_f64({3}, -1, 1, 3))}));
}

TEST(BatchNorm, GradcheckTrainingNchw) {
  Tensor rm = Tensor::zeros({3}, DType::f64), rv = Tensor::ones({3}, DType::f64);
  auto f = [&](const std::vector<Tensor>& in) { return batch_norm(in[0], in[1], in[2], rm, rv, true); };
  EXPECT_TRUE(gradcheck(f, {leaf(random_f64({2, 3, 2, 3}, -1, 1, 4)), leaf(random_f64({3}, 0.5, 1.5, 5)),
                            leaf(random_f64({3}, -1, 1, 6))}));
}

TEST(BatchNorm, GradcheckTrainingPartialAndNoAffine) {
  Tensor rm = Tensor::zeros({2}, DType::f64), rv = Tensor::ones({2}, DType::f64);
  Tensor w = random_f64({2}, 0.5, 1.5, 8), b = random_f64({2}, -1, 1, 9);
  auto only_x = [&](const std::vector<Tensor>& in) { return batch_norm(in[0], w, b, rm, rv, true); };
  EXPECT_TRUE(gradcheck(only_x, {leaf(random_f64({3, 2, 2, 2}, -1, 1, 10))}));
  auto no_affine = [&](const std::vector<Tensor>& in) {
    return batch_norm(in[0], Tensor(), Tensor(), rm, rv, true);
  };
  EXPECT_TRUE(gradcheck(no_affine, {leaf(random_f64({3, 2, 2, 2}, -1, 1, 11))}));
  Tensor x = random_f64({3, 2, 2, 2}, -1, 1, 12);
  auto only_wb = [&](const std::vector<Tensor>& in) { return batch_norm(x, in[0], in[1], rm, rv, true); };
  EXPECT_TRUE(gradcheck(only_wb, {leaf(random_f64({2}, 0.5, 1.5, 13)), leaf(random_f64({2}, -1, 1, 14))}));
}

// Only the bias wants a gradient: the op saves no statistics, and backward must not read
// them (it used to dereference null save_invstd / running_var on the CPU).
TEST(BatchNorm, GradcheckBiasOnlyTrainingAndEval) {
  Tensor x = random_f64({3, 2, 2, 2}, -1, 1, 12), w = random_f64({2}, 0.5, 1.5, 13);
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "eval");
    Tensor rm = Tensor::zeros({2}, DType::f64), rv = Tensor::ones({2}, DType::f64);
    auto only_b = [&](const std::vector<Tensor>& in) { return batch_norm(x, w, in[0], rm, rv, training); };
    EXPECT_TRUE(gradcheck(only_b, {leaf(random_f64({2}, -1, 1, 14))}));
    Tensor b = leaf(random_f64({2}, -1, 1, 14));
    batch_norm(x, w, b, rm, rv, training).backward(Tensor::ones({3, 2, 2, 2}, DType::f64));
    EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{12.0, 12.0}));   // N*H*W ones per channel
  }
}

TEST(BatchNorm, GradcheckEval) {
  Tensor rm = random_f64({3}, -0.5, 0.5, 20), rv = random_f64({3}, 0.5, 2.0, 21);
  auto f = [&](const std::vector<Tensor>& in) { return batch_norm(in[0], in[1], in[2], rm, rv, false); };
  EXPECT_TRUE(gradcheck(f, {leaf(random_f64({2, 3, 2, 2}, -1, 1, 22)), leaf(random_f64({3}, 0.5, 1.5, 23)),
                            leaf(random_f64({3}, -1, 1, 24))}));
  EXPECT_TRUE(gradcheck(f, {leaf(random_f64({4, 3}, -1, 1, 25)), leaf(random_f64({3}, 0.5, 1.5, 26)),
                            leaf(random_f64({3}, -1, 1, 27))}));
}

TEST(BatchNorm, Float32MatchesFloat64) {
  Tensor x64 = random_f64({4, 3, 3, 3}, -2, 3, 30), w64 = random_f64({3}, 0.5, 1.5, 31);
  Tensor b64 = random_f64({3}, -1, 1, 32);
  Tensor rm64 = Tensor::zeros({3}, DType::f64), rv64 = Tensor::ones({3}, DType::f64);
  Tensor rm32 = Tensor::zeros({3}), rv32 = Tensor::ones({3});
  Tensor x32 = leaf(x64.to(DType::f32)), w32 = leaf(w64.to(DType::f32)), b32 = leaf(b64.to(DType::f32));
  x64 = leaf(x64); w64 = leaf(w64); b64 = leaf(b64);
  Tensor g = random_f64({4, 3, 3, 3}, -1, 1, 33);
  batch_norm(x64, w64, b64, rm64, rv64, true).backward(g);
  Tensor y32 = batch_norm(x32, w32, b32, rm32, rv32, true);
  y32.backward(g.to(DType::f32));
  Tensor y64 = batch_norm(x64.detach(), w64.detach(), b64.detach(), rm64, rv64, true);
  expect_near(y32.to_vector(), y64.to_vector(), 1e-5);
  expect_near(x32.grad().to_vector(), x64.grad().to_vector(), 1e-5);
  expect_near(w32.grad().to_vector(), w64.grad().to_vector(), 1e-4);
  expect_near(b32.grad().to_vector(), b64.grad().to_vector(), 1e-4);
}

TEST(BatchNorm, Errors) {
  Tensor rm = Tensor::zeros({3}), rv = Tensor::ones({3});
  Tensor x = Tensor::zeros({2, 3, 2, 2});
  std::string msg = error_of([&] { batch_norm(x, Tensor::ones({4}), Tensor(), rm, rv, true); });
  EXPECT_NE(msg.find("batch_norm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3, 2, 2]"), std::string::npos) << msg;
  EXPECT_THROW(batch_norm(x, Tensor::ones({4}), Tensor(), rm, rv, true), ShapeError);
  EXPECT_THROW(batch_norm(x, Tensor(), Tensor::ones({2}), rm, rv, true), ShapeError);
  Tensor rm4 = Tensor::zeros({4}), rv4 = Tensor::ones({4});
  EXPECT_THROW(batch_norm(x, Tensor(), Tensor(), rm4, rv4, true), ShapeError);
  EXPECT_THROW(batch_norm(Tensor::zeros({2, 3, 4}), Tensor(), Tensor(), rm, rv, true), ShapeError);
  EXPECT_THROW(batch_norm(Tensor::zeros({1, 3}), Tensor(), Tensor(), rm, rv, true), ValueError);
  EXPECT_THROW(batch_norm(x, Tensor::ones({3}, DType::f64), Tensor(), rm, rv, true), DTypeError);
}
