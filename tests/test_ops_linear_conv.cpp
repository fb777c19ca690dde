// test_ops_linear_conv.cpp — matmul / linear / conv2d: float64 gradchecks, float32 values
// against naive direct references (forward, backward data, backward weight) over a
// table of conv configs (stride, padding, dilation, groups incl. depthwise, bias,
// non-square kernels, small and large panels), shape errors, thread-count determinism,
// and meta-device parity (shapes and allocator peaks equal to cpu).
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "engine/memory/caching_allocator.h"
#include "engine/ops/conv.h"
#include "engine/ops/linear.h"
#include "gradcheck.h"

using namespace oomlab;
using oomlab::testing::gradcheck;
using oomlab::testing::leaf;
using oomlab::testing::random_f64;

TEST(Matmul, GradcheckAndValues) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector({1, 0, 0, 1, 1, 1}, {3, 2});
  EXPECT_EQ(matmul(a, b).to_vector(), (std::vector<double>{4, 5, 10, 11}));
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); },
                        {leaf(random_f64({3, 4}, -1, 1, 1)), leaf(random_f64({4, 5}, -1, 1, 2))}));
  // transposed (non-contiguous) operand
  EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& v) { return matmul(v[0].transpose(0, 1), v[1]); },
                        {leaf(random_f64({4, 3}, -1, 1, 3)), leaf(random_f64({4, 2}, -1, 1, 4))}));
}

TEST(Linear, Gradcheck) {
  auto with_bias = [](const std::vector<Tensor>& v) { return linear(v[0], v[1], v[2]); };
  auto no_bias = [](const std::vector<Tensor>& v) { return linear(v[0], v[1], Tensor()); };
  EXPECT_TRUE(gradcheck(with_bias, {leaf(random_f64({3, 4}, -1, 1, 5)), leaf(random_f64({2, 4}, -1, 1, 6)),
                                    leaf(random_f64({2}, -1, 1, 7))}));
  EXPECT_TRUE(gradcheck(no_bias, {leaf(random_f64({3, 4}, -1, 1, 8)), leaf(random_f64({5, 4}, -1, 1, 9))}));
  // leading dims [B, T, in]; only the weight requires grad
  EXPECT_TRUE(gradcheck(with_bias, {random_f64({2, 3, 4}, -1, 1, 10), leaf(random_f64({3, 4}, -1, 1, 11)),
                                    leaf(random_f64({3}, -1, 1, 12))}));
}

TEST(Linear, Values) {
  Tensor x = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  Tensor w = Tensor::from_vector({1, 0, 1, 1, 0, 2}, {3, 2});
  Tensor b = Tensor::from_vector({10, 20, 30}, {3});
  EXPECT_EQ(linear(x, w, b).to_vector(), (std::vector<double>{11, 23, 34, 13, 27, 38}));
}

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

// ---------------------------------------------------------------- conv configs
struct ConvCase { int64_t C, H, W, K, R, S; Conv2dParams p; bool bias; };
Conv2dParams P(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t g) {
  Conv2dParams p; p.stride_h = sh; p.stride_w = sw; p.pad_h = ph; p.pad_w = pw; p.dil_h = dh; p.dil_w = dw;
  p.groups = g; return p;
}
const std::vector<ConvCase> kSmallCases = {
    {3, 5, 5, 4, 3, 3, P(1, 1, 0, 0, 1, 1, 1), true},
    {3, 6, 5, 4, 3, 3, P(2, 2, 1, 1, 1, 1, 1), false},
    {2, 5, 6, 3, 3, 3, P(1, 1, 2, 2, 2, 2, 1), true},
    {4, 5, 5, 6, 3, 3, P(1, 1, 1, 1, 1, 1, 2), true},      // groups 2
    {4, 5, 5, 4, 3, 3, P(1, 1, 1, 1, 1, 1, 4), false},     // depthwise
    {4, 6, 6, 8, 3, 3, P(2, 2, 1, 1, 1, 1, 4), true},      // depthwise, multiplier 2, stride 2
    {3, 6, 5, 2, 2, 3, P(2, 1, 1, 0, 1, 1, 1), true},      // non-square kernel, mixed stride/pad
    {2, 7, 6, 3, 3, 2, P(1, 2, 2, 1, 2, 1, 1), false},     // mixed dilation
    {4, 4, 4, 6, 1, 1, P(1, 1, 0, 0, 1, 1, 2), false},     // 1x1 direct, groups 2
    {3, 5, 5, 4, 1, 1, P(2, 2, 0, 0, 1, 1, 1), true},      // 1x1 stride 2
};

TEST(Conv2d, GradcheckTable) {
  for (size_t i = 0; i < kSmallCases.size(); ++i) {
    const ConvCase& c = kSmallCases[i];
    Conv2dParams p = c.p;
    std::vector<Tensor> in = {leaf(random_f64({2, c.C, c.H, c.W}, -1, 1, 100 + i)),
                              leaf(random_f64({c.K, c.C / p.groups, c.R, c.S}, -1, 1, 200 + i))};
    if (c.bias) in.push_back(leaf(random_f64({c.K}, -1, 1, 300 + i)));
    auto f = [p](const std::vector<Tensor>& v) { return conv2d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), p); };
    EXPECT_TRUE(gradcheck(f, in)) << "case " << i;
  }
}

// Naive direct convolution (double accumulation) and its two adjoints.
struct Naive {
  ConvCase c; int64_t N, P, Q;
  template <class F> void each(F f) const {   // f(n, k, p, q, ci, h, w, r, s) for valid taps
    const int64_t G = c.p.groups, Cg = c.C / G, Kg = c.K / G;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < c.K; ++k)
        for (int64_t p = 0; p < P; ++p)
          for (int64_t q = 0; q < Q; ++q)
            for (int64_t cl = 0; cl < Cg; ++cl)
              for (int64_t r = 0; r < c.R; ++r)
                for (int64_t s = 0; s < c.S; ++s) {
                  int64_t h = p * c.p.stride_h - c.p.pad_h + r * c.p.dil_h;
                  int64_t w = q * c.p.stride_w - c.p.pad_w + s * c.p.dil_w;
                  if (h < 0 || h >= c.H || w < 0 || w >= c.W) continue;
                  f(n, k, p, q, (k / Kg) * Cg + cl, h, w, cl, r, s);
                }
  }
};

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol, const char* what,
                  size_t idx) {
  ASSERT_EQ(a.size(), b.size());
  double scale = 1e-3;
  for (double v : b) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_LE(std::fabs(a[i] - b[i]), tol * scale) << what << " case " << idx << " element " << i;
}

TEST(Conv2d, Float32MatchesNaiveReference) {
  std::vector<ConvCase> cases = kSmallCases;
  // Large spatial sizes: tiles within one image (direct 1x1 in place, GEMM into y).
  cases.push_back({3, 48, 48, 4, 1, 1, P(1, 1, 0, 0, 1, 1, 1), true});
  cases.push_back({4, 46, 47, 6, 3, 3, P(1, 1, 1, 1, 1, 1, 2), true});
  cases.push_back({3, 50, 50, 4, 5, 3, P(1, 1, 2, 1, 1, 1, 1), false});
  // Several pixel tiles per image, split mid-row (P*Q > 2048 columns).
  cases.push_back({4, 45, 47, 5, 3, 3, P(1, 1, 1, 1, 1, 1, 1), true});
  cases.push_back({2, 65, 65, 3, 1, 1, P(1, 1, 0, 0, 1, 1, 1), false});
  cases.push_back({2, 97, 97, 4, 3, 3, P(2, 2, 1, 1, 1, 1, 2), true});
  for (size_t idx = 0; idx < cases.size(); ++idx) {
    const ConvCase& c = cases[idx];
    const int64_t N = 3, Cg = c.C / c.p.groups;
    Tensor x = Tensor::uniform({N, c.C, c.H, c.W}, -1, 1), w = Tensor::uniform({c.K, Cg, c.R, c.S}, -1, 1);
    Tensor b = c.bias ? Tensor::uniform({c.K}, -1, 1) : Tensor();
    x.set_requires_grad(true); w.set_requires_grad(true);
    Tensor y = conv2d(x, w, b, c.p);
    Naive nv{c, N, y.size(2), y.size(3)};
    std::vector<double> xv = x.to_vector(), wv = w.to_vector(), ref(size_t(y.numel()), 0.0);
    Tensor gy = Tensor::uniform(y.shape(), -1, 1);
    std::vector<double> gv = gy.to_vector(), dx(xv.size(), 0.0), dw(wv.size(), 0.0);
    auto yi = [&](int64_t n, int64_t k, int64_t p, int64_t q) { return ((n * c.K + k) * nv.P + p) * nv.Q + q; };
    auto xi = [&](int64_t n, int64_t ci, int64_t h, int64_t ww) { return ((n * c.C + ci) * c.H + h) * c.W + ww; };
    auto wi = [&](int64_t k, int64_t cl, int64_t r, int64_t s) { return ((k * Cg + cl) * c.R + r) * c.S + s; };
    nv.each([&](int64_t n, int64_t k, int64_t p, int64_t q, int64_t ci, int64_t h, int64_t ww, int64_t cl,
                int64_t r, int64_t s) {
      ref[yi(n, k, p, q)] += xv[xi(n, ci, h, ww)] * wv[wi(k, cl, r, s)];
      dx[xi(n, ci, h, ww)] += gv[yi(n, k, p, q)] * wv[wi(k, cl, r, s)];
      dw[wi(k, cl, r, s)] += gv[yi(n, k, p, q)] * xv[xi(n, ci, h, ww)];
    });
    if (c.bias) {
      std::vector<double> bv = b.to_vector();
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += bv[(i / size_t(nv.P * nv.Q)) % size_t(c.K)];
    }
    expect_close(y.to_vector(), ref, 1e-5, "forward", idx);
    sum_all(mul(y, gy)).backward();
    expect_close(x.grad().to_vector(), dx, 1e-5, "backward data", idx);
    expect_close(w.grad().to_vector(), dw, 1e-5, "backward weight", idx);
  }
}

// An x without elements but with padding (PyTorch rejects it; we define it): the output
// covers padding only, so y = bias, dw = 0, db = the output count per channel.
TEST(Conv2d, EmptyInputWithPaddingGivesBiasOnly) {
  Tensor x = Tensor::empty({2, 3, 0, 0}, DType::f32, cpu_device());
  EXPECT_TRUE(x.is_contiguous());
  x.set_requires_grad(true);
  Tensor w = leaf(random_f64({4, 3, 1, 1}, -1, 1, 7).to(DType::f32));
  Tensor b = leaf(Tensor::from_vector({1, 2, 3, 4}, {4}, DType::f32));
  Tensor y = conv2d(x, w, b, Conv2dParams{1, 1, 1, 1, 1, 1, 1});
  ASSERT_EQ(y.shape(), (Shape{2, 4, 2, 2}));
  const std::vector<double> v = y.to_vector();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], double(i / 4 % 4 + 1)) << i;
  sum_all(y).backward();
  EXPECT_EQ(x.grad().numel(), 0);
  for (double g : w.grad().to_vector()) EXPECT_EQ(g, 0.0);
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{8, 8, 8, 8}));
}

TEST(Conv2d, DeterministicAcrossThreadCounts) {
  Conv2dParams p = P(1, 1, 1, 1, 1, 1, 1);
  Tensor x = Tensor::uniform({6, 16, 40, 40}, -1, 1), w = Tensor::uniform({16, 16, 3, 3}, -1, 1);
  auto run = [&](int threads, int blas_threads) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(blas_threads);
    Tensor xx = x.detach(), ww = w.detach(), b = Tensor::zeros({16});
    ww.set_requires_grad(true); xx.set_requires_grad(true); b.set_requires_grad(true);
    Tensor y = conv2d(xx, ww, b, p);
    sum_all(mul(y, y)).backward();
    std::vector<double> out = ww.grad().to_vector(), gx = xx.grad().to_vector(), gb = b.grad().to_vector();
    out.insert(out.end(), gx.begin(), gx.end());
    out.insert(out.end(), gb.begin(), gb.end());
    return out;
  };
  int nt = omp_get_max_threads();
  const int nb = openblas_get_num_threads(), many = std::max(2, nt);
  std::vector<double> a = run(1, 1), b = run(many, many), c = run(1, many);
  omp_set_num_threads(nt);
  openblas_set_num_threads(nb);
  EXPECT_TRUE(a == b) << "1 vs " << many << " threads";
  EXPECT_TRUE(a == c) << "OpenMP 1, OpenBLAS " << many << " threads";
}

// ---------------------------------------------------------------- meta device parity
int64_t peak_after(Device dev, bool conv) {
  reset_allocators();
  Tensor x = conv ? Tensor::empty({4, 8, 16, 16}, DType::f32, dev) : Tensor::empty({64, 300}, DType::f32, dev);
  Tensor w = conv ? Tensor::empty({16, 8, 3, 3}, DType::f32, dev) : Tensor::empty({500, 300}, DType::f32, dev);
  Tensor b = Tensor::empty({conv ? 16 : 500}, DType::f32, dev);
  if (dev.is_cpu()) { x.fill_(0.5); w.fill_(0.25); b.fill_(0.0); }
  x.set_requires_grad(true); w.set_requires_grad(true); b.set_requires_grad(true);
  Tensor y = conv ? conv2d(x, w, b, P(2, 2, 1, 1, 1, 1, 1)) : linear(x, w, b);
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
