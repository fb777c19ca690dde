// test_ops_batchnorm_pool.cpp — batch_norm, max_pool2d, avg_pool2d, adaptive_avg_pool2d:
// hand-computed forward values, running-stat updates, float64 gradchecks, shape errors,
// and meta-device runs that must allocate exactly as cpu does.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/pool.h"
#include "tests/gradcheck.h"

using namespace oomlab;
using oomlab::testing::gradcheck;
using oomlab::testing::leaf;
using oomlab::testing::random_f64;

namespace {
void expect_near(const std::vector<double>& got, const std::vector<double>& want, double tol = 1e-6) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

template <class F> std::string error_of(F&& f) {
  try { f(); } catch (const Error& e) { return e.what(); }
  return "";
}
}  // namespace

// ---------------------------------------------------------------- batch_norm
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

// ---------------------------------------------------------------- pooling
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

// ---------------------------------------------------------------- determinism
TEST(BatchNormPool, ResultsIndependentOfThreadCount) {
  auto run = [](int threads) {
    const int prev = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor x = leaf(random_f64({6, 5, 9, 9}, -2, 2, 70).to(DType::f32));
    Tensor w = leaf(Tensor::full({5}, 1.5)), b = leaf(Tensor::zeros({5}));
    Tensor rm = Tensor::zeros({5}), rv = Tensor::ones({5});
    Tensor h = batch_norm(x, w, b, rm, rv, true);
    h = avg_pool2d(max_pool2d(h, {3, 3, 2, 2, 1, 1}), {2, 2, 1, 1});
    h = adaptive_avg_pool2d(h, 2, 2);
    h.backward(random_f64(h.shape(), -1, 1, 71).to(DType::f32));
    omp_set_num_threads(prev);
    std::vector<double> all = h.to_vector();
    for (const Tensor& t : {x.grad(), w.grad(), b.grad(), rm, rv})
      for (double v : t.to_vector()) all.push_back(v);
    return all;
  };
  EXPECT_EQ(run(1), run(3));
}

// ---------------------------------------------------------------- meta device
namespace {
using Events = std::vector<std::pair<std::string, size_t>>;

Events run_net(Device d) {
  CachingAllocator& al = allocator_for(d);
  al.empty_cache();
  Tensor x = Tensor::empty({4, 8, 9, 9}, DType::f32, d);
  x.fill_(0.5);
  x.set_requires_grad(true);
  Tensor w = Tensor::ones({8}, DType::f32, d), b = Tensor::zeros({8}, DType::f32, d);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor rm = Tensor::zeros({8}, DType::f32, d), rv = Tensor::ones({8}, DType::f32, d);
  al.clear_trace();
  al.record_history(true);
  {
    Tensor h = batch_norm(x, w, b, rm, rv, true);
    h = max_pool2d(h, {3, 3, 2, 2, 1, 1});
    h = avg_pool2d(h, {2, 2, 2, 2});
    h = adaptive_avg_pool2d(h, 1, 1);
    h = batch_norm(h.reshape({4, 8}), Tensor(), b, rm, rv, false);
    h.backward(Tensor::ones({4, 8}, DType::f32, d));
    NoGradGuard ng;
    Tensor e = max_pool2d(batch_norm(x, w, b, rm, rv, false), {2, 2, 2, 2});
  }
  al.record_history(false);
  Events ev;
  for (const TraceEvent& t : al.trace())
    if (t.action == "alloc" || t.action == "free_completed") ev.emplace_back(t.action, t.size);
  return ev;
}
}  // namespace

TEST(BatchNormPool, MetaAllocatesLikeCpu) {
  Events cpu = run_net(cpu_device());
  Events meta = run_net(meta_device());
  EXPECT_GT(cpu.size(), 10u);
  EXPECT_EQ(cpu, meta);
}
