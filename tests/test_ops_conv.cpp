// test_ops_conv.cpp — conv2d and conv_transpose2d: float64 gradchecks over a table of
// conv configs (stride, padding, dilation, groups incl. depthwise, bias, non-square
// kernels), float32 values and both backward passes against naive direct references
// (small and large panels), an empty input with padding, thread-count determinism
// (OpenMP and OpenBLAS), conv_transpose2d's output shapes and error messages; conv2d_relu
// (--fuse-relu): gradchecks and the unfused pair's bytes. The direct
// float32 kernels: test_ops_conv_direct.cpp; shape errors and meta-device peaks with
// linear: test_ops_cross_family.cpp.
// ctest tier: ops
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/activation.h"
#include "engine/ops/conv.h"
#include "engine/ops/elementwise.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

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

// float64 gradcheck of op(x, w, b, p) over kSmallCases; inputs seeded from seed0 (x), +100
// (w) and +200 (b).
template <class Op> void gradcheck_table(Op op, uint64_t seed0) {
  for (size_t i = 0; i < kSmallCases.size(); ++i) {
    const ConvCase& c = kSmallCases[i];
    Conv2dParams p = c.p;
    std::vector<Tensor> in = {leaf(random_f64({2, c.C, c.H, c.W}, -1, 1, seed0 + i)),
                              leaf(random_f64({c.K, c.C / p.groups, c.R, c.S}, -1, 1, seed0 + 100 + i))};
    if (c.bias) in.push_back(leaf(random_f64({c.K}, -1, 1, seed0 + 200 + i)));
    auto f = [p, op](const std::vector<Tensor>& v) { return op(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), p); };
    EXPECT_TRUE(gradcheck(f, in)) << "case " << i;
  }
}

TEST(Conv2d, GradcheckTable) {
  gradcheck_table(
      [](const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) { return conv2d(x, w, b, p); }, 100);
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

// ---------------------------------------------------------------- conv_transpose2d
namespace {
// Naive F.conv_transpose2d: every input pixel scatters weight * x into the output.
std::vector<double> naive_conv_transpose(const Tensor& x, const Tensor& w, const Tensor& b,
                                         const ConvTranspose2dParams& p, const Shape& y) {
  std::vector<double> xv = x.to_vector(), wv = w.to_vector(), out(size_t(shape_numel(y)), 0.0);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t Kg = w.size(1), R = w.size(2), S = w.size(3), Cg = C / p.groups, K = y[1];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t ww = 0; ww < W; ++ww)
          for (int64_t j = 0; j < Kg; ++j)
            for (int64_t r = 0; r < R; ++r)
              for (int64_t s = 0; s < S; ++s) {
                const int64_t oh = h * p.stride - p.padding + r, ow = ww * p.stride - p.padding + s;
                if (oh < 0 || oh >= y[2] || ow < 0 || ow >= y[3]) continue;
                const int64_t k = (c / Cg) * Kg + j;
                out[size_t(((n * K + k) * y[2] + oh) * y[3] + ow)] +=
                    xv[size_t(((n * C + c) * H + h) * W + ww)] * wv[size_t(((c * Kg + j) * R + r) * S + s)];
              }
  if (b.defined()) {
    std::vector<double> bv = b.to_vector();
    for (size_t i = 0; i < out.size(); ++i) out[i] += bv[(i / size_t(y[2] * y[3])) % size_t(K)];
  }
  return out;
}
}  // namespace

TEST(ConvTranspose, SinglePixelReproducesKernel) {
  Tensor w = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}, DType::f64);
  Tensor y = conv_transpose2d(Tensor::ones({1, 1, 1, 1}, DType::f64), w, Tensor());
  EXPECT_EQ(y.shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(y.to_vector(), w.to_vector());
  // Stride 2: a 1 at (1, 1) of a 3x3 input lands the kernel at rows/cols 2..4 of 7x7.
  std::vector<double> xv(9, 0.0);
  xv[4] = 1;
  Tensor y2 = conv_transpose2d(Tensor::from_vector(xv, {1, 1, 3, 3}, DType::f64), w, Tensor(), {2, 0, 0, 1});
  ASSERT_EQ(y2.shape(), (Shape{1, 1, 7, 7}));
  std::vector<double> v = y2.to_vector();
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t c = 0; c < 7; ++c) {
      const bool in = r >= 2 && r <= 4 && c >= 2 && c <= 4;
      EXPECT_EQ(v[size_t(r * 7 + c)], in ? double((r - 2) * 3 + (c - 2) + 1) : 0.0) << r << "," << c;
    }
  // Channel 0 of a 2-channel input selects weight[0]: [3, 2, 2] output channels.
  Tensor w3 = random_f64({2, 3, 2, 2}, -1, 1, 5);
  Tensor y3 = conv_transpose2d(Tensor::from_vector({1, 0}, {1, 2, 1, 1}, DType::f64), w3, Tensor());
  std::vector<double> w3v = w3.to_vector();
  EXPECT_EQ(y3.to_vector(), std::vector<double>(w3v.begin(), w3v.begin() + 12));
}

TEST(ConvTranspose, MatchesNaiveReference) {
  struct Case { Shape x, w; ConvTranspose2dParams p; bool bias; };
  for (const Case& c : {Case{{2, 3, 4, 5}, {3, 2, 3, 3}, {1, 0, 0, 1}, true},
                        Case{{2, 3, 4, 5}, {3, 2, 3, 3}, {2, 1, 1, 1}, true},
                        Case{{1, 4, 3, 3}, {4, 3, 2, 2}, {2, 0, 0, 1}, false},
                        Case{{2, 4, 3, 4}, {4, 2, 3, 3}, {2, 1, 1, 2}, true},
                        Case{{1, 2, 5, 5}, {2, 3, 1, 1}, {1, 0, 0, 1}, true},
                        Case{{1, 2, 3, 3}, {2, 2, 4, 4}, {3, 2, 2, 1}, false},
                        Case{{2, 3, 5, 4}, {3, 2, 1, 1}, {2, 0, 1, 1}, true},     // uncovered output pixels
                        Case{{1, 2, 6, 5}, {2, 3, 3, 3}, {1, 2, 0, 1}, true}}) {   // padding > R - 1
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor x = random_f64(c.x, -1, 1, 21).to(dt), w = random_f64(c.w, -1, 1, 22).to(dt);
      Tensor b = c.bias ? random_f64({c.w[1] * c.p.groups}, -1, 1, 23).to(dt) : Tensor();
      Tensor y = conv_transpose2d(x, w, b, c.p);
      expect_near(y.to_vector(), naive_conv_transpose(x, w, b, c.p, y.shape()), dt == DType::f64 ? 1e-12 : 1e-5);
    }
  }
}

TEST(ConvTranspose, OutputShape) {
  Tensor w = Tensor::zeros({4, 3, 3, 3});
  EXPECT_EQ(conv_transpose2d(Tensor::zeros({2, 4, 5, 6}), w, Tensor(), {2, 1, 1, 1}).shape(),
            (Shape{2, 3, 10, 12}));   // (H-1)*stride - 2*pad + R + output_padding
  EXPECT_EQ(conv_transpose2d(Tensor::zeros({2, 4, 5, 6}), w, Tensor()).shape(), (Shape{2, 3, 7, 8}));
  EXPECT_EQ(conv_transpose2d(Tensor::zeros({1, 4, 8, 8}), Tensor::zeros({4, 2, 2, 2}), Tensor(), {2, 0, 0, 1})
                .shape(),
            (Shape{1, 2, 16, 16}));   // the UNet up-convolution doubles H and W
  EXPECT_EQ(conv_transpose2d(Tensor::zeros({1, 4, 3, 3}), Tensor::zeros({4, 3, 3, 3}), Tensor(), {1, 0, 0, 2})
                .shape(),
            (Shape{1, 6, 5, 5}));   // groups: K = weight[1] * groups
}

TEST(ConvTranspose, Errors) {
  std::string msg = error_of([] {
    conv_transpose2d(Tensor::zeros({2, 5, 4, 4}), Tensor::zeros({4, 3, 3, 3}), Tensor());
  });
  EXPECT_TRUE(contains(msg, "conv_transpose2d")) << msg;
  EXPECT_TRUE(contains(msg, "[2, 5, 4, 4]")) << msg;
  EXPECT_TRUE(contains(msg, "[4, 3, 3, 3]")) << msg;
  EXPECT_THROW(conv_transpose2d(Tensor::zeros({2, 5, 4, 4}), Tensor::zeros({4, 3, 3, 3}), Tensor()), ShapeError);
  Tensor x = Tensor::zeros({1, 4, 4, 4}), w = Tensor::zeros({4, 3, 3, 3});
  EXPECT_THROW(conv_transpose2d(x, w, Tensor(), {2, 0, 2, 1}), ValueError);   // output_padding >= stride
  EXPECT_THROW(conv_transpose2d(x, w, Tensor(), {1, 0, 1, 1}), ValueError);
  EXPECT_THROW(conv_transpose2d(x, w, Tensor(), {0, 0, 0, 1}), ValueError);
  EXPECT_THROW(conv_transpose2d(x, w, Tensor(), {1, -1, 0, 1}), ValueError);
  EXPECT_THROW(conv_transpose2d(x, w, Tensor(), {1, 0, 0, 0}), ValueError);   // groups
  EXPECT_THROW(conv_transpose2d(x, w, Tensor(), {1, 0, 0, 3}), ShapeError);   // 4 % 3 != 0
  EXPECT_THROW(conv_transpose2d(x, w, Tensor(), {1, 3, 0, 1}), ShapeError);   // empty output
  EXPECT_THROW(conv_transpose2d(Tensor::zeros({4, 4, 4}), w, Tensor()), ShapeError);
  msg = error_of([&] { conv_transpose2d(x, w, Tensor::zeros({4})); });
  EXPECT_TRUE(contains(msg, "bias [4]")) << msg;
  EXPECT_THROW(conv_transpose2d(x, w, Tensor::zeros({4})), ShapeError);
  EXPECT_THROW(conv_transpose2d(x, Tensor::zeros({4, 3, 3, 3}, DType::f64), Tensor()), DTypeError);
}

TEST(ConvTranspose, Gradchecks) {
  struct Case { Shape x, w; ConvTranspose2dParams p; bool bias; };
  for (const Case& c : {Case{{2, 2, 3, 3}, {2, 3, 3, 3}, {1, 0, 0, 1}, true},
                        Case{{2, 2, 3, 3}, {2, 3, 3, 3}, {1, 1, 0, 1}, false},
                        Case{{1, 2, 3, 4}, {2, 2, 3, 3}, {2, 0, 0, 1}, false},
                        Case{{2, 2, 3, 3}, {2, 2, 3, 3}, {2, 1, 1, 1}, true},
                        Case{{1, 3, 2, 3}, {3, 2, 2, 2}, {2, 0, 1, 1}, true},
                        Case{{1, 4, 3, 3}, {4, 1, 3, 3}, {2, 1, 1, 2}, true}}) {
    std::vector<Tensor> in{leaf(random_f64(c.x, -1, 1, 31)), leaf(random_f64(c.w, -1, 1, 32))};
    if (c.bias) in.push_back(leaf(random_f64({c.w[1] * c.p.groups}, -1, 1, 33)));
    const ConvTranspose2dParams p = c.p;
    EXPECT_TRUE(gradcheck([p](const std::vector<Tensor>& t) {
                            return conv_transpose2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), p);
                          },
                          in))
        << shape_str(c.x) << " stride " << p.stride << " pad " << p.padding << " out_pad " << p.output_padding
        << " groups " << p.groups;
  }
  // Only x needs grad / only the weight needs grad.
  Tensor w = random_f64({2, 3, 3, 3}, -1, 1, 34);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return conv_transpose2d(t[0], w, Tensor(), {2, 1, 1, 1}); },
                        {leaf(random_f64({1, 2, 3, 3}, -1, 1, 35))}));
  Tensor x = random_f64({1, 2, 3, 3}, -1, 1, 36);
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& t) { return conv_transpose2d(x, t[0], Tensor(), {2, 1, 1, 1}); },
                        {leaf(random_f64({2, 3, 3, 3}, -1, 1, 37))}));
}

// ---------------------------------------------------------------- conv2d_relu (--fuse-relu)
// relu_(conv2d(x, w, b)) with the relu in the bias pass: float64 gradchecks over the table,
// and in float32 (NCHW and channels_last, with and without bias) the same bytes as the
// unfused pair, forward and every gradient.
TEST(Conv2dRelu, GradcheckTable) {
  gradcheck_table(
      [](const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) { return conv2d_relu(x, w, b, p); },
      400);
}

TEST(Conv2dRelu, SameBytesAsConvThenRelu) {
  for (bool channels_last : {false, true})
    for (bool bias : {true, false}) {
      SCOPED_TRACE(std::string(channels_last ? "channels_last" : "NCHW") + (bias ? " bias" : " no bias"));
      auto run = [&](bool fused) {
        Tensor x = random_f64({2, 4, 7, 6}, -1, 1, 71).to(DType::f32),
               w = random_f64({5, 4, 3, 3}, -1, 1, 72).to(DType::f32);
        if (channels_last) x = x.contiguous(MemoryFormat::channels_last);
        Tensor b = bias ? random_f64({5}, -1, 1, 73).to(DType::f32) : Tensor();
        for (Tensor* t : {&x, &w, &b})
          if (t->defined()) t->set_requires_grad(true);
        Tensor y = fused ? conv2d_relu(x, w, b, P(1, 1, 1, 1, 1, 1, 1)) : conv2d(x, w, b, P(1, 1, 1, 1, 1, 1, 1));
        if (!fused) y = relu_(y);
        sum_all(mul(y, random_f64(y.shape(), -1, 1, 74).to(DType::f32))).backward();
        std::vector<std::vector<uint8_t>> out = {tensor_bytes(y.contiguous()), tensor_bytes(x.grad().contiguous()),
                                                 tensor_bytes(w.grad().contiguous())};
        if (bias) out.push_back(tensor_bytes(b.grad()));
        return out;
      };
      EXPECT_EQ(run(true), run(false));
    }
}
