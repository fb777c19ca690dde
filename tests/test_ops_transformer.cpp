// test_ops_transformer.cpp — embedding, layer_norm, scaled_dot_product_attention: float64 gradchecks for every op,
// forward values against hand-computed or naive references, shape / range errors,
// thread-count determinism of the column reductions, and meta == cpu allocation
// sequences for a small attention block (forward + backward).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/loss.h"
#include "engine/ops/transformer_ops.h"
#include "tests/gradcheck.h"

using namespace oomlab;
using oomlab::testing::gradcheck;
using oomlab::testing::leaf;
using oomlab::testing::random_f64;

namespace {
template <class E, class F> std::string error_of(F&& f) {
  try { f(); } catch (const E& e) { return e.what(); }
  return "<no exception of the expected type>";
}
bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }
void expect_near(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "element " << i;
}
Tensor u8_mask(const std::vector<double>& v, const Shape& s, Device dev = cpu_device()) {
  return Tensor::from_vector(v, s, DType::u8, dev);
}
}  // namespace

// ---- embedding -------------------------------------------------------------------------
TEST(Embedding, ValuesAndGradcheck) {
  Tensor w = Tensor::from_vector({0, 1, 10, 11, 20, 21}, {3, 2}, DType::f64);
  Tensor ids = Tensor::from_vector_i64({2, 0, 2, 1}, {2, 2});
  Tensor out = embedding(w, ids);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(out.to_vector(), (std::vector<double>{20, 21, 0, 1, 20, 21, 10, 11}));
  // repeated ids, padding_idx set (row 4, not looked up: its numeric gradient is 0 too)
  Tensor ids2 = Tensor::from_vector_i64({1, 3, 1, 0, 3, 1}, {2, 3});
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], ids2, 4); },
                        {leaf(random_f64({5, 3}, -1, 1, 1))}));
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return embedding(in[0], ids2); },
                        {leaf(random_f64({5, 3}, -1, 1, 2))}));
}

TEST(Embedding, PaddingRowGetsNoGradAndRepeatsAccumulate) {
  Tensor w = leaf(random_f64({4, 3}, -1, 1, 3));
  Tensor ids = Tensor::from_vector_i64({2, 0, 2, 2, 1, 0}, {6});
  Tensor g = random_f64({6, 3}, -1, 1, 4);
  Tensor out = embedding(w, ids, /*padding_idx=*/0);
  EXPECT_EQ(out.to_vector()[3], w.to_vector()[0]);   // the padding row is still looked up
  out.backward(g);
  std::vector<double> gw = w.grad().to_vector(), gv = g.to_vector();
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(gw[0 * 3 + c], 0.0);                                        // padding row
    EXPECT_NEAR(gw[2 * 3 + c], gv[0 * 3 + c] + gv[2 * 3 + c] + gv[3 * 3 + c], 1e-15);  // id 2 x3
    EXPECT_EQ(gw[1 * 3 + c], gv[4 * 3 + c]);
    EXPECT_EQ(gw[3 * 3 + c], 0.0);                                        // never used
  }
}

TEST(Embedding, Errors) {
  Tensor w = Tensor::zeros({5, 2});
  std::string m = error_of<ValueError>([&] { embedding(w, Tensor::from_vector_i64({1, 7, 2}, {3})); });
  EXPECT_TRUE(has(m, "index 7")) << m;
  EXPECT_TRUE(has(m, "5")) << m;
  m = error_of<ValueError>([&] { embedding(w, Tensor::from_vector_i64({-1}, {1})); });
  EXPECT_TRUE(has(m, "index -1")) << m;
  EXPECT_THROW(embedding(w, Tensor::from_vector({1}, {1})), DTypeError);
  EXPECT_THROW(embedding(w, Tensor::from_vector_i64({1}, {1}), 5), ValueError);
  // meta has no data: no range check, shapes only
  Tensor wm = Tensor::empty({5, 2}, DType::f32, meta_device());
  Tensor om = embedding(wm, Tensor::empty({2, 3}, DType::i64, meta_device()));
  EXPECT_EQ(om.shape(), (Shape{2, 3, 2}));
}

// ---- layer_norm -------------------------------------------------------------------------
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
  EXPECT_TRUE(has(m, "[7]") && has(m, "[2, 3, 8]") && has(m, "weight")) << m;
  m = error_of<ShapeError>([&] { layer_norm(x, Tensor::ones({8}), Tensor::zeros({2, 4})); });
  EXPECT_TRUE(has(m, "[2, 4]") && has(m, "bias")) << m;
}

// ---- scaled_dot_product_attention ----------------------------------------------------------
namespace {
// Naive softmax(q k^T / sqrt(D) with padded keys at -inf) v, no dropout.
std::vector<double> naive_attention(const Tensor& q, const Tensor& k, const Tensor& v, const std::vector<int>& pad) {
  const int64_t B = q.size(0), NH = q.size(1), T = q.size(2), D = q.size(3), Tk = k.size(2), Dv = v.size(3);
  std::vector<double> Q = q.to_vector(), K = k.to_vector(), V = v.to_vector(), out(size_t(B * NH * T * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<size_t>(Tk));
        double mx = -INFINITY, z = 0;
        for (int64_t j = 0; j < Tk; ++j) {
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += Q[((b * NH + h) * T + i) * D + d] * K[((b * NH + h) * Tk + j) * D + d];
          s[j] = pad[b * Tk + j] ? -INFINITY : acc / std::sqrt(double(D));
          mx = std::max(mx, s[j]);
        }
        for (int64_t j = 0; j < Tk; ++j) z += s[j] = std::exp(s[j] - mx);
        for (int64_t j = 0; j < Tk; ++j)
          for (int64_t d = 0; d < Dv; ++d)
            out[((b * NH + h) * T + i) * Dv + d] += s[j] / z * V[((b * NH + h) * Tk + j) * Dv + d];
      }
  return out;
}
}  // namespace

TEST(Attention, ValuesAndGradcheck) {
  std::vector<int> pad = {0, 0, 0, 0, 0, 0, 1, 1};   // B=2, T=4: batch 1 pads 2 keys
  Tensor m = u8_mask({0, 0, 0, 0, 0, 0, 1, 1}, {2, 4});
  Tensor q = leaf(random_f64({2, 2, 4, 3}, -1, 1, 28)), k = leaf(random_f64({2, 2, 4, 3}, -1, 1, 29)),
         v = leaf(random_f64({2, 2, 4, 3}, -1, 1, 30));
  expect_near(scaled_dot_product_attention(q, k, v, m, 0.0, true).to_vector(), naive_attention(q, k, v, pad), 1e-12);
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) { return scaled_dot_product_attention(in[0], in[1], in[2], m, 0.0, true); },
      {q, k, v}));
  // dropout 0.1: the same mask on every call (generator reset inside the closure)
  {
    Generator gen{42, 0};
    std::vector<double> dropped = scaled_dot_product_attention(q, k, v, m, 0.1, true, gen).to_vector();
    EXPECT_EQ(gen.offset, uint64_t(2 * 2 * 4 * 4 / 4));   // one uniform per probability
    std::vector<double> plain = naive_attention(q, k, v, pad);
    size_t differ = 0;
    for (size_t i = 0; i < plain.size(); ++i) differ += std::fabs(dropped[i] - plain[i]) > 1e-9;
    EXPECT_GT(differ, 0u);   // some probabilities were dropped
  }
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) {
        Generator gen{42, 0};
        return scaled_dot_product_attention(in[0], in[1], in[2], m, 0.1, true, gen);
      },
      {q, k, v}));
  // Tq != Tk, Dv != D, permuted (non-contiguous) inputs as a model produces them
  Tensor q2 = leaf(random_f64({1, 3, 2, 2}, -1, 1, 31)), k2 = leaf(random_f64({1, 5, 2, 2}, -1, 1, 32)),
         v2 = leaf(random_f64({1, 5, 2, 3}, -1, 1, 33));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return scaled_dot_product_attention(in[0].permute({0, 2, 1, 3}), in[1].permute({0, 2, 1, 3}),
                                            in[2].permute({0, 2, 1, 3}), Tensor(), 0.0, false);
      },
      {q2, k2, v2}));
  // eval mode ignores dropout
  Generator g1{1, 0};
  expect_near(scaled_dot_product_attention(q, k, v, m, 0.5, false, g1).to_vector(), naive_attention(q, k, v, pad), 1e-12);
  EXPECT_EQ(g1.offset, 0u);
  EXPECT_THROW(scaled_dot_product_attention(q, k, Tensor::zeros({2, 2, 3, 3}, DType::f64), m, 0.0, true), ShapeError);
}

// ---- determinism -------------------------------------------------------------------------------
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

// ---- meta == cpu -----------------------------------------------------------------------------
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
