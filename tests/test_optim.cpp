// test_optim.cpp — SGD/Adam/AdamW against scalar re-statements of PyTorch's documented
// algorithms (float64), hand-computed values, LR schedules and their parser, WeightEma,
// checkpoint round trips, and meta == cpu allocation for lazily created state.
// ctest tier: unit
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <numbers>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/optim/ema.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"

using namespace oomlab;
using Vec = std::vector<double>;

namespace {
Tensor param(const Vec& v, DType dt = DType::f64, Device dev = cpu_device()) {
  Tensor t = Tensor::from_vector(v, {int64_t(v.size())}, dt, dev);
  t.set_requires_grad(true);
  return t;
}
void set_grad(Tensor& p, const Vec& g) { p.set_grad(Tensor::from_vector(g, p.shape(), p.dtype(), p.device())); }

void expect_near(const Vec& a, const Vec& b, double tol = 1e-12) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i]))) << "index " << i;
}

// torch.optim.SGD, written out per element.
struct SgdRef {
  double lr, momentum = 0, dampening = 0, wd = 0;
  bool nesterov = false;
  Vec buf;
  void step(Vec& p, const Vec& g) {
    bool first = buf.empty();
    if (first) buf.resize(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + wd * p[i];
      if (momentum != 0) {
        buf[i] = first ? d : momentum * buf[i] + (1 - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
};

// torch.optim.Adam (decoupled=false) / AdamW (decoupled=true), written out per element.
struct AdamRef {
  double lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0;
  bool decoupled = false;
  Vec m, v;
  int t = 0;
  void step(Vec& p, const Vec& g) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      double gi = g[i];
      if (decoupled) p[i] *= 1 - lr * wd;
      else gi += wd * p[i];
      m[i] = beta1 * m[i] + (1 - beta1) * gi;
      v[i] = beta2 * v[i] + (1 - beta2) * gi * gi;
      double mhat = m[i] / (1 - std::pow(beta1, t));
      double vhat = v[i] / (1 - std::pow(beta2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

const std::vector<Vec> kGrads = {{0.5, -1.0, 2.0, 0.0}, {0.25, 0.5, -1.5, 1.0}, {-0.75, 0.1, 0.3, -2.0},
                                 {1.0, 1.0, -1.0, 0.5}};
const Vec kInit = {1.0, -2.0, 0.5, 3.0};

void run_sgd(ParamGroup hp) {
  SgdRef ref{hp.lr, hp.momentum, hp.dampening, hp.weight_decay, hp.nesterov, {}};
  Tensor p = param(kInit);
  hp.params = {{"w", p}};
  auto opt = make_optimizer("sgd", {hp});
  Vec expect = kInit;
  for (const Vec& g : kGrads) {
    set_grad(p, g);
    opt->step();
    ref.step(expect, g);
    expect_near(p.to_vector(), expect);
  }
  EXPECT_EQ(opt->step_count(), int64_t(kGrads.size()));
}

void run_adam(const std::string& name, ParamGroup hp) {
  AdamRef ref{hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, name == "adamw", {}, {}, 0};
  Tensor p = param(kInit);
  hp.params = {{"w", p}};
  auto opt = make_optimizer(name, {hp});
  Vec expect = kInit;
  for (const Vec& g : kGrads) {
    set_grad(p, g);
    opt->step();
    ref.step(expect, g);
    expect_near(p.to_vector(), expect, 1e-10);
  }
}
}  // namespace

TEST(Sgd, HandComputedMomentum) {
  // p=1, g=0.5 twice, lr=0.1, momentum=0.9: buf=0.5, p=0.95; buf=0.9*0.5+0.5=0.95, p=0.855.
  Tensor p = param({1.0});
  ParamGroup g;
  g.params = {{"w", p}};
  g.lr = 0.1;
  g.momentum = 0.9;
  auto opt = make_optimizer("sgd", {g});
  set_grad(p, {0.5});
  opt->step();
  EXPECT_NEAR(p.item(), 0.95, 1e-15);
  opt->step();
  EXPECT_NEAR(p.item(), 0.855, 1e-15);
}

TEST(Sgd, MatchesReference) {
  ParamGroup hp;
  hp.lr = 0.1;
  run_sgd(hp);                                   // plain
  hp.momentum = 0.9;
  run_sgd(hp);                                   // momentum
  hp.dampening = 0.3;
  run_sgd(hp);                                   // dampening (not applied at step 1)
  hp.weight_decay = 0.01;
  run_sgd(hp);                                   // + L2 weight decay
  hp.dampening = 0;
  hp.nesterov = true;
  run_sgd(hp);                                   // nesterov + weight decay
}

TEST(Adam, HandComputedFirstStep) {
  // Step 1 with wd=0: m_hat = g, v_hat = g^2 -> p -= lr * g / (|g| + eps).
  Tensor p = param({1.0, 2.0});
  ParamGroup g;
  g.params = {{"w", p}};
  g.lr = 0.01;
  auto opt = make_optimizer("adam", {g});
  set_grad(p, {0.5, -3.0});
  opt->step();
  EXPECT_NEAR(p.to_vector()[0], 1.0 - 0.01 * 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR(p.to_vector()[1], 2.0 + 0.01 * 3.0 / (3.0 + 1e-8), 1e-15);
}

TEST(Adam, MatchesReference) {
  ParamGroup hp;
  hp.lr = 0.01;
  run_adam("adam", hp);
  hp.weight_decay = 0.1;
  hp.beta1 = 0.8;
  hp.beta2 = 0.99;
  hp.eps = 1e-6;
  run_adam("adam", hp);     // L2 added to grad
  run_adam("adamw", hp);    // decoupled: p *= 1 - lr*wd
  hp.beta1 = 0.3;           // 1-beta1 >= 0.5: the other branch of lerp
  run_adam("adamw", hp);
}

TEST(Optimizer, PerGroupLrSkipsMissingGradsAndBumpsVersion) {
  Tensor a = param({1.0}), b = param({1.0}), c = param({1.0});
  ParamGroup g1, g2;
  g1.params = {{"a", a}, {"c", c}};
  g1.lr = 0.1;
  g2.params = {{"b", b}};
  g2.lr = 1.0;
  auto opt = make_optimizer("sgd", {g1, g2});
  set_grad(a, {1.0});
  set_grad(b, {1.0});
  uint64_t va = a.version(), vc = c.version();
  opt->step();
  EXPECT_NEAR(a.item(), 0.9, 1e-15);
  EXPECT_NEAR(b.item(), 0.0, 1e-15);
  EXPECT_EQ(c.item(), 1.0);
  EXPECT_GT(a.version(), va);
  EXPECT_EQ(c.version(), vc);
  EXPECT_EQ(opt->step_count(), 1);
  opt->zero_grad();
  EXPECT_FALSE(a.grad().defined());
  opt->zero_grad(false);   // no grads: nothing to do
}

TEST(Optimizer, Errors) {
  Tensor p = param({1.0});
  ParamGroup g;
  g.params = {{"w", p}};
  EXPECT_THROW(make_optimizer("rmsprop", {g}), ValueError);
  try {
    make_optimizer("lion", {g});
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("'lion'"), std::string::npos);
  }
  ParamGroup bad = g;
  bad.nesterov = true;
  EXPECT_THROW(make_optimizer("sgd", {bad}), ValueError);   // nesterov needs momentum
  bad = g;
  bad.lr = -1;
  EXPECT_THROW(make_optimizer("adam", {bad}), ValueError);
  bad = g;
  bad.beta2 = 1.0;
  EXPECT_THROW(make_optimizer("adamw", {bad}), ValueError);
  EXPECT_THROW(make_optimizer("sgd", {g, g}), ValueError);  // same parameter twice
  EXPECT_THROW(make_optimizer("sgd", {ParamGroup{}}), ValueError);
  auto opt = make_optimizer("sgd", {g});
  p.set_grad(Tensor::from_vector({1.0, 2.0}, {2}, DType::f64));
  EXPECT_THROW(opt->step(), ShapeError);
  p.set_grad(Tensor::from_vector({1.0}, {1}, DType::f32));
  EXPECT_THROW(opt->step(), DTypeError);
}

TEST(Optimizer, StateRoundTripGivesIdenticalNextStep) {
  for (const char* name : {"sgd", "adam", "adamw"}) {
    SCOPED_TRACE(name);
    Tensor p1 = param(kInit), q1 = param({0.5, 0.25});
    ParamGroup g;
    g.lr = 0.05;
    g.momentum = 0.9;
    g.weight_decay = 0.01;
    g.params = {{"layer.w", p1}, {"layer.b", q1}};
    auto a = make_optimizer(name, {g});
    for (int s = 0; s < 2; ++s) {
      set_grad(p1, kGrads[size_t(s)]);
      set_grad(q1, {0.1 * s, -0.2});
      a->step();
    }
    nlohmann::json js = nlohmann::json::parse(a->state_json().dump());   // through text, as on disk
    NamedTensors ts = a->state_tensors();
    ASSERT_EQ(ts.size(), std::string(name) == "sgd" ? 2u : 4u);
    EXPECT_EQ(ts[0].first, std::string(name) == "sgd" ? "state.layer.w.momentum_buffer" : "state.layer.w.exp_avg");
    NamedTensors copies;
    for (auto& [n, t] : ts) copies.emplace_back(n, t.detach().clone());

    Tensor p2 = param(p1.to_vector()), q2 = param(q1.to_vector());
    ParamGroup g2;
    g2.lr = 123;   // overwritten by load_state
    g2.params = {{"layer.w", p2}, {"layer.b", q2}};
    auto b = make_optimizer(name, {g2});
    b->load_state(js, copies);
    EXPECT_EQ(b->step_count(), 2);
    EXPECT_EQ(b->param_groups()[0].lr, 0.05);
    for (Tensor* p : {&p1, &p2}) set_grad(*p, kGrads[2]);
    for (Tensor* q : {&q1, &q2}) set_grad(*q, {0.3, 0.3});
    a->step();
    b->step();
    EXPECT_EQ(p1.to_vector(), p2.to_vector());
    EXPECT_EQ(q1.to_vector(), q2.to_vector());

    // Validation.
    EXPECT_THROW(b->load_state(js, {}), ValueError);                         // missing tensors
    NamedTensors extra = copies;
    extra.emplace_back("state.layer.x.exp_avg", copies[0].second);
    EXPECT_THROW(b->load_state(js, extra), ValueError);                      // unknown parameter
    NamedTensors wrong = copies;
    wrong[0].second = Tensor::zeros({3}, DType::f64);
    EXPECT_THROW(b->load_state(js, wrong), ShapeError);
    nlohmann::json other = js;
    other["optimizer"] = "other";
    EXPECT_THROW(b->load_state(other, copies), ValueError);
    nlohmann::json renamed = js;
    renamed["param_groups"][0]["params"][1] = "layer.bias";
    EXPECT_THROW(b->load_state(renamed, copies), ValueError);
    nlohmann::json broken = js;
    broken["param_groups"][0].erase("lr");
    EXPECT_THROW(b->load_state(broken, copies), ValueError);
    // Counts are non-negative int64s as the file spells them: 2.5 is not truncated to 2, and
    // JSON's unsigned 2^64 - 1 is named as such, not as -1.
    for (const nlohmann::json& count : {nlohmann::json(2.5), nlohmann::json(UINT64_MAX), nlohmann::json(-1)}) {
      nlohmann::json bad_step = js, bad_count = js;
      bad_step["state"]["layer.w"]["step"] = count;
      bad_count["step_count"] = count;
      for (const nlohmann::json* bad : {&bad_step, &bad_count}) {
        try {
          b->load_state(*bad, copies);
          ADD_FAILURE() << name << " took a count of " << count.dump();
        } catch (const ValueError& e) {
          EXPECT_NE(std::string(e.what()).find("must be a non-negative integer (got " + count.dump() + ")"),
                    std::string::npos) << e.what();
        }
      }
    }
  }
}

TEST(Optimizer, MetaAllocatesLikeCpu) {
  // Sizes straddle the small/large pools; state bytes appear only after step 1.
  const std::vector<Shape> shapes = {{256, 300}, {300}, {1024, 1024}, {7}};
  for (const char* name : {"sgd", "adam", "adamw"}) {
    std::vector<int64_t> before, after;
    for (Device dev : {cpu_device(), meta_device()}) {
      reset_allocators();
      {
        ParamGroup g;
        g.momentum = 0.9;
        std::vector<Tensor> ps;
        for (size_t i = 0; i < shapes.size(); ++i) {
          Tensor p = Tensor::zeros(shapes[i], DType::f32, dev);
          p.set_requires_grad(true);
          p.set_grad(Tensor::zeros(shapes[i], DType::f32, dev));
          std::string pname = "p";
          pname += std::to_string(i);
          g.params.emplace_back(pname, p);
        }
        auto opt = make_optimizer(name, {g});
        CachingAllocator& al = allocator_for(dev);
        before.push_back(al.stat("allocated_bytes.all.current"));
        opt->step();
        after.push_back(al.stat("allocated_bytes.all.current"));
        opt->step();
        EXPECT_EQ(al.stat("allocated_bytes.all.current"), after.back()) << "no growth after step 1";
      }
      EXPECT_EQ(allocator_for(dev).stat("allocated_bytes.all.current"), 0);
    }
    SCOPED_TRACE(name);
    EXPECT_EQ(before[0], before[1]);
    EXPECT_EQ(after[0], after[1]);
    int64_t state = 0;
    for (const Shape& s : shapes) state += (shape_numel(s) * 4 + 511) / 512 * 512;
    EXPECT_EQ(after[0] - before[0], std::string(name) == "sgd" ? state : 2 * state);
  }
  reset_allocators();
}

TEST(Optimizer, LargeFloatParamIsThreadCountIndependent) {
  const int64_t n = 100003;   // odd: chunk edges fall inside vector lanes
  Vec init(n), grad(n);
  for (int64_t i = 0; i < n; ++i)
    init[size_t(i)] = std::sin(0.001 * double(i)), grad[size_t(i)] = std::cos(0.37 * double(i));
  for (const char* name : {"sgd", "adamw"}) {
    std::vector<Vec> results;
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      Tensor p = param(init, DType::f32);
      ParamGroup g;
      g.lr = 0.01;
      g.momentum = 0.9;
      g.weight_decay = 0.01;
      g.params = {{"w", p}};
      auto opt = make_optimizer(name, {g});
      set_grad(p, grad);
      opt->step();
      opt->step();
      results.push_back(p.to_vector());
    }
    EXPECT_EQ(results[0], results[1]) << name;
    EXPECT_EQ(results[0], results[2]) << name;
    // float32 kernel vs float64 reference
    Vec expect = init;
    if (std::string(name) == "sgd") {
      SgdRef r{0.01, 0.9, 0, 0.01, false, {}};
      r.step(expect, grad), r.step(expect, grad);
    } else {
      AdamRef r{0.01, 0.9, 0.999, 1e-8, 0.01, true, {}, {}, 0};
      r.step(expect, grad), r.step(expect, grad);
    }
    for (int64_t i = 0; i < n; i += 997) EXPECT_NEAR(results[0][size_t(i)], expect[size_t(i)], 1e-5);
  }
  omp_set_num_threads(omp_get_num_procs());
}

// ---------------------------------------------------------------- LR schedules
// The state of every parameter is created before any update: an out-of-memory while
// creating it (here Adam's moments for the second parameter on a capped cpu allocator)
// leaves every parameter, step count and state as they were, and frees what it created.
TEST(Optimizer, OutOfMemoryWhileCreatingStateLeavesParametersUntouched) {
  for (const char* name : {"adam", "sgd"}) {
    SCOPED_TRACE(name);
    CachingAllocator& al = allocator_for(cpu_device());
    al.empty_cache();
    const int64_t n = 3 << 20;   // 12 MiB of float32: each state tensor gets a segment of its own
    Tensor p1 = Tensor::full({n}, 1.0).set_requires_grad(true), p2 = Tensor::full({n}, 2.0).set_requires_grad(true);
    p1.set_grad(Tensor::full({n}, 0.5));
    p2.set_grad(Tensor::full({n}, 0.25));
    ParamGroup g;
    g.params = {{"p1", p1}, {"p2", p2}};
    g.lr = 0.1;
    g.momentum = 0.9;
    auto opt = make_optimizer(name, {g});
    const int64_t allocated = al.stat("allocated_bytes.all.current");
    // Room for one state tensor: SGD's second momentum buffer and Adam's second moment fail.
    al.set_capacity(size_t(al.stat("reserved_bytes.all.current")) + size_t(n) * 4 + (1 << 20));
    EXPECT_THROW(opt->step(), OutOfMemoryError);
    EXPECT_EQ(al.stat("allocated_bytes.all.current"), allocated);   // the created state was dropped
    EXPECT_EQ(opt->step_count(), 0);
    EXPECT_TRUE(opt->state_tensors().empty());
    EXPECT_EQ(opt->state_json()["state"].size(), 0u);
    for (double v : p1.to_vector()) ASSERT_EQ(v, 1.0);
    for (double v : p2.to_vector()) ASSERT_EQ(v, 2.0);
    // With room, the same step runs as if nothing had happened.
    al.set_capacity(0);
    opt->step();
    EXPECT_EQ(opt->step_count(), 1);
    EXPECT_EQ(opt->state_tensors().size(), std::string(name) == "adam" ? 4u : 2u);
    EXPECT_LT(p1.to_vector()[0], 1.0);
    EXPECT_LT(p2.to_vector()[0], 2.0);
  }
}

TEST(LrSchedule, WarmupCosineMatchesSourceFormula) {
  const double lr_max = 0.1, lr_min = 1e-5;
  const int warm = 10, t_max = 50;
  auto formula = [&](int t) {
    if (t < warm) return double(t) / warm * lr_max;
    return lr_min + 0.5 * (lr_max - lr_min) * (1 + std::cos(std::numbers::pi * (t - warm) / (t_max - warm)));
  };
  Tensor p = param({1.0});
  ParamGroup g;
  g.lr = lr_max;
  g.params = {{"w", p}};
  auto opt = make_optimizer("sgd", {g});
  LrScheduler sched(*opt, parse_lr_schedule("warmup-cosine:warmup=10,t_max=50,lr_min=1e-5"));
  std::map<int, double> seen;
  for (int t = 0; t <= 60; ++t) {
    EXPECT_EQ(sched.last_step(), t);
    seen[t] = opt->param_groups()[0].lr;
    sched.step();
  }
  for (int t : {0, 5, 10, 30, 50}) EXPECT_NEAR(seen[t], formula(t), 1e-15) << "step " << t;
  EXPECT_EQ(seen[0], 0.0);
  EXPECT_NEAR(seen[5], 0.05, 1e-15);
  EXPECT_NEAR(seen[10], lr_max, 1e-15);
  EXPECT_NEAR(seen[30], (lr_max + lr_min) / 2, 1e-15);
  EXPECT_NEAR(seen[50], lr_min, 1e-15);
  EXPECT_EQ(seen[60], lr_min);   // held after t_max
}

TEST(LrSchedule, StepDecayCosineConstantAndLambda) {
  Tensor a = param({1.0}), b = param({1.0});
  ParamGroup g1, g2;
  g1.lr = 1.0;
  g1.params = {{"a", a}};
  g2.lr = 0.5;
  g2.params = {{"b", b}};
  auto opt = make_optimizer("adam", {g1, g2});
  {
    LrScheduler s(*opt, parse_lr_schedule("step:size=30,gamma=0.1"));
    for (int t = 0; t < 65; ++t) {
      double f = t < 30 ? 1.0 : t < 60 ? 0.1 : 0.01;
      EXPECT_NEAR(opt->param_groups()[0].lr, 1.0 * f, 1e-15) << t;
      EXPECT_NEAR(opt->param_groups()[1].lr, 0.5 * f, 1e-15) << t;
      s.step();
    }
    nlohmann::json st = s.state_json();
    EXPECT_EQ(st["last_step"], 65);
  }
  for (auto& g : opt->param_groups()) g.lr = 1.0;
  {
    LrScheduler s(*opt, cosine_schedule(100, 0.0));
    for (int t = 0; t < 50; ++t) s.step();
    EXPECT_NEAR(opt->param_groups()[0].lr, 0.5, 1e-15);
    LrScheduler c(*opt, parse_lr_schedule("constant"));
    c.step();
    EXPECT_EQ(opt->param_groups()[0].lr, 0.5);
  }
  for (auto& g : opt->param_groups()) g.lr = 1.0;
  LrScheduler l(*opt, [](int64_t t) { return 1.0 / double(t + 1); });
  l.step();
  l.step();
  EXPECT_NEAR(opt->param_groups()[1].lr, 1.0 / 3, 1e-15);
  // Resume: a fresh scheduler loading the state reproduces the lr.
  nlohmann::json st = l.state_json();
  for (auto& g : opt->param_groups()) g.lr = 7.0;
  LrScheduler l2(*opt, [](int64_t t) { return 1.0 / double(t + 1); });
  l2.load_state(st);
  EXPECT_EQ(l2.last_step(), 2);
  EXPECT_NEAR(opt->param_groups()[0].lr, 1.0 / 3, 1e-15);
  for (const nlohmann::json& count : {nlohmann::json(1.5), nlohmann::json(UINT64_MAX), nlohmann::json("2")}) {
    nlohmann::json bad = st;
    bad["last_step"] = count;
    EXPECT_THROW(l2.load_state(bad), ValueError) << count.dump();
  }
}

TEST(LrSchedule, ParseErrorsNameTheBadPart) {
  auto expect_error = [](const std::string& spec, const std::string& part) {
    try {
      parse_lr_schedule(spec);
      ADD_FAILURE() << "no error for " << spec;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error("linear", "unknown kind 'linear'");
  expect_error("step:size=abc", "'abc' of 'size'");
  expect_error("step:gamma=0.5", "missing key 'size'");
  expect_error("step:size=30,foo=1", "unknown key 'foo'");
  expect_error("step:size=30,,gamma=0.1", "bad part ''");
  expect_error("step:size=30,size=20", "'size' given twice");
  expect_error("cosine:t_max=10,lr_min=x1", "'x1' of 'lr_min'");
  expect_error("cosine:t_max=0", "t_max must be > 0");
  expect_error("warmup-cosine:warmup=50,t_max=50", "must be > warmup");
  expect_error("constant:x=1", "unknown key 'x'");
  expect_error("step:", "nothing after ':'");
  EXPECT_EQ(parse_lr_schedule("cosine:lr_min=1e-5,t_max=7").spec, "cosine:t_max=7,lr_min=1e-05");
}

// ---------------------------------------------------------------- EMA
TEST(WeightEma, UpdateSwapAndState) {
  Tensor w = param({1.0, 2.0});
  Tensor rm = Tensor::from_vector({0.0}, {1}, DType::f64);   // a buffer
  WeightEma ema({{"w", w}, {"bn.running_mean", rm}}, 0.9);
  // step 1: w -> {2, 4}; ema = 0.9*{1,2} + 0.1*{2,4} = {1.1, 2.2}
  w.detach().copy_(Tensor::from_vector({2.0, 4.0}, {2}, DType::f64));
  rm.copy_(Tensor::from_vector({5.0}, {1}, DType::f64));
  ema.update();
  // step 2: w -> {0, 0}; ema = 0.9*{1.1, 2.2} = {0.99, 1.98}
  w.detach().copy_(Tensor::from_vector({0.0, 0.0}, {2}, DType::f64));
  ema.update();
  EXPECT_EQ(ema.num_updates(), 2);
  NamedTensors st = ema.state_tensors();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].first, "ema.w");
  expect_near(st[0].second.to_vector(), {0.99, 1.98}, 1e-15);
  EXPECT_EQ(st[1].second.to_vector(), Vec{5.0});

  uint64_t v0 = w.version();
  ema.swap_in();
  expect_near(w.to_vector(), {0.99, 1.98}, 1e-15);
  EXPECT_EQ(rm.to_vector(), Vec{5.0});
  EXPECT_GT(w.version(), v0);
  expect_near(ema.state_tensors()[0].second.to_vector(), {0.99, 1.98}, 1e-15);   // EMA values while swapped
  EXPECT_THROW(ema.swap_in(), ValueError);
  EXPECT_THROW(ema.update(), ValueError);
  ema.swap_out();
  EXPECT_EQ(w.to_vector(), (Vec{0.0, 0.0}));
  EXPECT_THROW(ema.swap_out(), ValueError);

  // A view on the parameter forces the copying path; values are still exchanged exactly.
  Tensor view = w.detach();
  ema.swap_in();
  expect_near(w.to_vector(), {0.99, 1.98}, 1e-15);
  ema.swap_out();
  EXPECT_EQ(view.to_vector(), (Vec{0.0, 0.0}));

  // Round trip into a second EMA.
  Tensor w2 = param({0.0, 0.0});
  Tensor rm2 = Tensor::from_vector({0.0}, {1}, DType::f64);
  WeightEma ema2({{"w", w2}, {"bn.running_mean", rm2}});
  NamedTensors copies;
  for (auto& [n, t] : ema.state_tensors()) copies.emplace_back(n, t.detach().clone());
  ema2.load_state(copies);                       // tensors only: decay kept
  EXPECT_EQ(ema2.decay(), 0.999);
  ema2.load_state(copies, nlohmann::json::parse(ema.state_json().dump()));
  EXPECT_EQ(ema2.decay(), 0.9);
  EXPECT_EQ(ema2.num_updates(), 2);
  EXPECT_EQ(ema2.state_tensors()[0].second.to_vector(), ema.state_tensors()[0].second.to_vector());
  EXPECT_THROW(ema2.load_state({copies[0]}), ValueError);   // missing buffer
  nlohmann::json renamed = ema.state_json();
  renamed["buffers"][0] = "bn.running_var";
  EXPECT_THROW(ema2.load_state(copies, renamed), ValueError);
  NamedTensors bad = copies;
  bad[0].second = Tensor::zeros({3}, DType::f64);
  EXPECT_THROW(ema2.load_state(bad), ShapeError);
  nlohmann::json wrapped = ema.state_json();
  wrapped["num_updates"] = UINT64_MAX;
  EXPECT_THROW(ema2.load_state(copies, wrapped), ValueError);
  EXPECT_THROW(WeightEma({{"w", w}}, 1.5), ValueError);
}
