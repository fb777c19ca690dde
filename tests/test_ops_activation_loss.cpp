// test_ops_activation_loss.cpp — relu, relu_, dropout, softmax, log_softmax, nll_loss,
// cross_entropy, count_correct: float64 gradchecks, values, numerical stability, the
// dropout mask (statistics, seed and thread-count independence), in-place/version
// errors, target validation, and meta-device allocation parity with cpu.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/activation.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/loss.h"
#include "tests/gradcheck.h"

using namespace oomlab;
using oomlab::testing::gradcheck;
using oomlab::testing::leaf;
using oomlab::testing::random_f64;

namespace {
// Values in [-1, 1] pushed away from relu's kink at 0 (|v| >= 0.1).
Tensor away_from_zero(const Shape& shape, uint64_t seed) {
  std::vector<double> v = random_f64(shape, -1, 1, seed).to_vector();
  for (double& x : v) x = x < 0 ? x - 0.1 : x + 0.1;
  return Tensor::from_vector(v, shape, DType::f64);
}

template <class F> std::string error_of(F&& f) {
  try { f(); } catch (const Error& e) { return e.what(); }
  return "";
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
}

namespace {
// A small training-like step on `dev`; returns (action, size) of every allocator event.
std::vector<std::pair<std::string, size_t>> run_step(Device dev) {
  reset_allocators();
  CachingAllocator& al = allocator_for(dev);
  al.record_history(true);
  {
    Tensor x = Tensor::uniform({64, 300}, -1, 1, DType::f32, dev);
    x.set_requires_grad(true);
    Tensor t = Tensor::from_vector_i64(std::vector<int64_t>(64, 3), {64}, dev);
    Generator gen{1, 0};
    Tensor h = scale(x, 1.0);
    relu_(h);
    Tensor r = relu(add(h, h));
    Tensor d = dropout(r, 0.5, true, gen);
    Tensor s = softmax(d);
    // (no sum_all here: its backward reads g.item() on cpu, which allocates on cpu only)
    Tensor loss = add(cross_entropy(d, t), nll_loss(log_softmax(s), t));
    loss.backward();
    (void)count_correct(d, t);
    EXPECT_EQ(gen.offset, uint64_t(64 * 300 / 4));
  }
  std::vector<std::pair<std::string, size_t>> ev;
  for (const TraceEvent& e : al.trace()) ev.emplace_back(e.action, e.size);
  EXPECT_EQ(al.stat("allocated_bytes.all.current"), 0);
  return ev;
}
}  // namespace

TEST(Meta, AllocationsEqualCpu) {
  auto cpu_events = run_step(cpu_device());
  CachingAllocator& cpu = allocator_for(cpu_device());
  std::map<std::string, int64_t> cpu_stats = cpu.stats();
  auto meta_events = run_step(meta_device());
  std::map<std::string, int64_t> meta_stats = allocator_for(meta_device()).stats();
  EXPECT_GT(cpu_events.size(), 20u);
  EXPECT_EQ(cpu_events, meta_events);
  for (const char* k : {"allocation.all.allocated", "allocated_bytes.all.peak", "allocated_bytes.all.allocated",
                        "reserved_bytes.all.peak"})
    EXPECT_EQ(cpu_stats.at(k), meta_stats.at(k)) << k;
}
