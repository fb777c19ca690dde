// test_ops_cross_family.cpp — op tests that span families: error messages of several
// families checked together, results independent of the thread count for chains of ops,
// and meta-device runs of op chains (forward + backward) that must allocate exactly as
// cpu does (same allocator events, same peaks). One section per group of families.
// ctest tier: ops
#include <gtest/gtest.h>
#include <omp.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/activation.h"
#include "engine/ops/attention.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/concat.h"
#include "engine/ops/conv.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/embedding.h"
#include "engine/ops/layernorm.h"
#include "engine/ops/linear.h"
#include "engine/ops/loss.h"
#include "engine/ops/pool.h"
#include "engine/ops/softmax.h"
#include "engine/ops/upsample.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

// ------------------------------------------------ linear + conv: shape errors, meta peaks
TEST(LinearConv, ShapeErrors) {
  auto msg_of = [](auto&& f) -> std::string {
    try { f(); } catch (const ShapeError& e) { return e.what(); }
    return "<no ShapeError>";
  };
  std::string m = msg_of([] { linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}), Tensor()); });
  EXPECT_NE(m.find("linear"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  m = msg_of([] { matmul(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})); });
  EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 5]"), std::string::npos) << m;
  m = msg_of([] { conv2d(Tensor::zeros({2, 3, 8, 8}), Tensor::zeros({4, 2, 3, 3}), Tensor()); });
  EXPECT_NE(m.find("conv2d"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3, 8, 8]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 2, 3, 3]"), std::string::npos) << m;
  m = msg_of([] { conv2d(Tensor::zeros({2, 3, 2, 2}), Tensor::zeros({4, 3, 3, 3}), Tensor()); });
  EXPECT_NE(m.find("conv2d"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 3, 2, 2]"), std::string::npos) << m;
  EXPECT_NE(m.find("[4, 3, 3, 3]"), std::string::npos) << m;
  Conv2dParams g3; g3.groups = 3;
  m = msg_of([&] { conv2d(Tensor::zeros({1, 4, 5, 5}), Tensor::zeros({6, 1, 3, 3}), Tensor(), g3); });
  EXPECT_NE(m.find("[1, 4, 5, 5]"), std::string::npos) << m;
  EXPECT_THROW(conv2d(Tensor::zeros({1, 3, 5, 5}), Tensor::zeros({4, 3, 3, 3}), Tensor::zeros({3})), ShapeError);
  EXPECT_THROW(conv2d(Tensor::zeros({3, 5, 5}), Tensor::zeros({4, 3, 3, 3}), Tensor()), ShapeError);
  Conv2dParams bad; bad.stride_h = 0;
  EXPECT_THROW(conv2d(Tensor::zeros({1, 3, 5, 5}), Tensor::zeros({4, 3, 3, 3}), Tensor(), bad), ValueError);
}

int64_t peak_after(Device dev, bool conv) {
  reset_allocators();
  Tensor x = conv ? Tensor::empty({4, 8, 16, 16}, DType::f32, dev) : Tensor::empty({64, 300}, DType::f32, dev);
  Tensor w = conv ? Tensor::empty({16, 8, 3, 3}, DType::f32, dev) : Tensor::empty({500, 300}, DType::f32, dev);
  Tensor b = Tensor::empty({conv ? 16 : 500}, DType::f32, dev);
  if (dev.is_cpu()) { x.fill_(0.5); w.fill_(0.25); b.fill_(0.0); }
  x.set_requires_grad(true); w.set_requires_grad(true); b.set_requires_grad(true);
  Tensor y = conv ? conv2d(x, w, b, Conv2dParams{2, 2, 1, 1, 1, 1, 1}) : linear(x, w, b);
  EXPECT_EQ(y.shape(), conv ? (Shape{4, 16, 8, 8}) : (Shape{64, 500}));
  EXPECT_EQ(y.device(), dev);
  sum_all(y).backward();
  EXPECT_EQ(w.grad().shape(), w.shape());
  EXPECT_EQ(x.grad().shape(), x.shape());
  EXPECT_EQ(b.grad().shape(), b.shape());
  return allocator_for(dev).stat("allocated_bytes.all.peak");
}

TEST(LinearConv, MetaMatchesCpuAllocation) {
  for (bool conv : {false, true}) {
    int64_t cpu_peak = peak_after(cpu_device(), conv);
    int64_t meta_peak = peak_after(meta_device(), conv);
    EXPECT_GT(cpu_peak, 0);
    EXPECT_EQ(cpu_peak, meta_peak) << (conv ? "conv2d" : "linear");
  }
  reset_allocators();
  // matmul on meta
  Tensor a = Tensor::empty({3, 4}, DType::f32, meta_device()), bb = Tensor::empty({4, 7}, DType::f32, meta_device());
  a.set_requires_grad(true);
  Tensor m = matmul(a, bb);
  EXPECT_EQ(m.shape(), (Shape{3, 7}));
  sum_all(m).backward();
  EXPECT_EQ(a.grad().shape(), (Shape{3, 4}));
  EXPECT_FALSE(bb.grad().defined());
}

// ------------------------------------------------ batch_norm + pools: thread count, meta == cpu
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

// ------------------------------------------------ relu, dropout, softmax, losses: meta == cpu
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

// ------------------------------------------------ embedding .. attention block: threads, meta
TEST(Transformer, ColumnReductionsIndependentOfThreadCount) {
  const int saved = omp_get_max_threads();
  auto run = [](int threads) {
    omp_set_num_threads(threads);
    Tensor w = Tensor::uniform({50, 300}, -1, 1, DType::f32);
    w.set_requires_grad(true);
    Generator gen{9, 0};
    std::vector<int64_t> idv(400);
    for (auto& i : idv) i = int64_t(gen.next_below(50));
    Tensor ids = Tensor::from_vector_i64(idv, {400});
    Tensor lw = Tensor::uniform({300}, 0.5, 1.5, DType::f32), lb = Tensor::uniform({300}, -1, 1, DType::f32);
    lw.set_requires_grad(true);
    lb.set_requires_grad(true);
    Tensor y = gelu(layer_norm(embedding(w, ids, 3), lw, lb));
    y.backward(Tensor::uniform(y.shape(), -1, 1, DType::f32));
    std::vector<double> r = w.grad().to_vector(), a = lw.grad().to_vector(), b = lb.grad().to_vector();
    r.insert(r.end(), a.begin(), a.end());
    r.insert(r.end(), b.begin(), b.end());
    return r;
  };
  manual_seed(5);
  std::vector<double> one = run(1);
  manual_seed(5);
  std::vector<double> two = run(2);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
}

namespace {
// A small BERT-like block on `dev`, forward + backward; returns (action, size) of every
// allocator event.
std::vector<std::pair<std::string, size_t>> attention_block(Device dev) {
  reset_allocators();
  CachingAllocator& al = allocator_for(dev);
  al.record_history(true);
  {
    const int64_t B = 2, T = 6, H = 8, NH = 2, D = 4, V = 11;
    manual_seed(1);
    Generator gen{3, 0};
    auto param = [&](const Shape& s) {
      Tensor t = Tensor::uniform(s, -0.5, 0.5, DType::f32, dev);
      t.set_requires_grad(true);
      return t;
    };
    Tensor emb = param({V, H}), lnw = param({H}), lnb = param({H});
    Tensor wq = param({H, H}), wk = param({H, H}), wv = param({H, H}), wo = param({H, H}), bo = param({H});
    Tensor ids = Tensor::from_vector_i64({1, 2, 3, 4, 5, 0, 6, 7, 8, 9, 0, 0}, {B, T}, dev);
    Tensor mask = u8_mask({0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1}, {B, T}, dev);
    Tensor x = layer_norm(embedding(emb, ids, 0), lnw, lnb);
    auto heads = [&](const Tensor& w) { return linear(x, w, Tensor()).reshape({B, T, NH, D}).permute({0, 2, 1, 3}); };
    Tensor a = scaled_dot_product_attention(heads(wq), heads(wk), heads(wv), mask, 0.1, true, gen);
    Tensor o = linear(a.permute({0, 2, 1, 3}).reshape({B, T, H}), wo, bo);
    Tensor h = gelu(add(x, o), "tanh");
    std::vector<Tensor> c = chunk(h, 2, 2);
    Tensor s = split(h, {2, 4, 2}, 2)[1];
    Tensor y = cat({bmm(c[0], s.transpose(1, 2)), c[1]}, 2);   // [B, T, T + 4]
    y.backward(Tensor::ones(y.shape(), DType::f32, dev));
  }
  std::vector<std::pair<std::string, size_t>> ev;
  for (const TraceEvent& e : al.trace()) ev.emplace_back(e.action, e.size);
  EXPECT_EQ(al.stat("allocated_bytes.all.current"), 0);
  return ev;
}
}  // namespace

TEST(Transformer, MetaAllocationsEqualCpu) {
  auto cpu_events = attention_block(cpu_device());
  auto meta_events = attention_block(meta_device());
  EXPECT_GT(cpu_events.size(), 60u);
  EXPECT_EQ(cpu_events, meta_events);
}

// ------------------------------------------------ upsample .. pixel CE chain: threads, meta
TEST(Vision, ThreadCountIndependent) {
  auto run = [](int threads) {
    int prev = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor x = leaf(Tensor::uniform({2, 8, 33, 47}, -1, 1, DType::f32));
    Tensor w = leaf(Tensor::uniform({8, 5, 2, 2}, -1, 1, DType::f32));
    Tensor u = upsample2x(x, "bilinear");
    Tensor y = conv_transpose2d(upsample2x(sigmoid(u), "nearest"), w, Tensor(), {2, 0, 0, 1});
    std::vector<int64_t> tv(size_t(2 * y.size(2) * y.size(3)));
    for (size_t i = 0; i < tv.size(); ++i) tv[i] = i % 7 == 0 ? -100 : int64_t(i % 5);
    Tensor loss = pixel_cross_entropy(y, Tensor::from_vector_i64(tv, {2, y.size(2), y.size(3)}));
    loss.backward();
    omp_set_num_threads(prev);
    std::vector<double> out = x.grad().to_vector(), gw = w.grad().to_vector();
    out.insert(out.end(), gw.begin(), gw.end());
    out.push_back(loss.item());
    return out;
  };
  Generator saved = device_generator(cpu_device()).get_state();
  std::vector<double> a = run(1);
  device_generator(cpu_device()).set_state(saved);
  std::vector<double> b = run(2);
  EXPECT_EQ(a, b);
}

namespace {
std::vector<std::pair<std::string, size_t>> run_chain(Device dev) {
  reset_allocators();
  CachingAllocator& al = allocator_for(dev);
  al.record_history(true);
  {
    Tensor x = Tensor::uniform({2, 4, 5, 3}, -1, 1, DType::f32, dev);
    x.set_requires_grad(true);
    Tensor w = Tensor::uniform({4, 3, 2, 2}, -1, 1, DType::f32, dev);
    w.set_requires_grad(true);
    Tensor b = Tensor::uniform({3}, -1, 1, DType::f32, dev);
    b.set_requires_grad(true);
    Tensor t = Tensor::from_vector_i64(std::vector<int64_t>(2 * 13 * 20, 1), {2, 13, 20}, dev);
    Tensor u = upsample2x(x.transpose(2, 3), "bilinear");                       // [2, 4, 6, 10]
    Tensor y = conv_transpose2d(upsample2x(u, "nearest").narrow(3, 0, 19), w, b);   // strided input
    Tensor s = sigmoid(y);
    Tensor loss = pixel_cross_entropy(s, t);
    EXPECT_EQ(s.shape(), (Shape{2, 3, 13, 20}));
    loss.backward();
  }
  std::vector<std::pair<std::string, size_t>> ev;
  for (const TraceEvent& e : al.trace()) ev.emplace_back(e.action, e.size);
  EXPECT_EQ(al.stat("allocated_bytes.all.current"), 0);
  return ev;
}
}  // namespace

TEST(Meta, VisionChainAllocationsEqualCpu) {
  auto cpu_events = run_chain(cpu_device());
  std::map<std::string, int64_t> cpu_stats = allocator_for(cpu_device()).stats();
  auto meta_events = run_chain(meta_device());
  std::map<std::string, int64_t> meta_stats = allocator_for(meta_device()).stats();
  EXPECT_GT(cpu_events.size(), 15u);
  EXPECT_EQ(cpu_events, meta_events);
  for (const char* k : {"allocation.all.allocated", "allocated_bytes.all.peak", "allocated_bytes.all.allocated",
                        "reserved_bytes.all.peak"})
    EXPECT_EQ(cpu_stats.at(k), meta_stats.at(k)) << k;
}
