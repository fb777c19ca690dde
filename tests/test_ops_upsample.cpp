// test_ops_upsample.cpp — upsample2x (nearest, bilinear): forward values against
// hand-computed results and PyTorch's source-index formula, the backward as a sum over
// sources, float64 gradchecks, and errors (mode, rank, dtype). Thread-count and
// meta-device checks of an upsample -> conv_transpose -> sigmoid -> pixel CE chain:
// test_ops_cross_family.cpp.
// ctest tier: ops
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/ops/upsample.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using namespace oomlab::testing;

TEST(Upsample, NearestValues) {
  Tensor x = Tensor::from_vector({1, 2, 3, 4}, {1, 1, 2, 2}, DType::f64);
  Tensor y = upsample2x(x, "nearest");
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  EXPECT_EQ(y.to_vector(), (std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  EXPECT_EQ(upsample2x(x).to_vector(), y.to_vector());   // nearest is the default
}

TEST(Upsample, BilinearValues) {
  Tensor row = Tensor::from_vector({1, 2}, {1, 1, 1, 2}, DType::f64);
  EXPECT_EQ(upsample2x(row, "bilinear").to_vector(), (std::vector<double>{1, 1.25, 1.75, 2, 1, 1.25, 1.75, 2}));
  // torch.nn.functional.interpolate([[1, 2], [3, 4]], scale_factor=2, mode="bilinear")
  Tensor x = Tensor::from_vector({1, 2, 3, 4}, {1, 1, 2, 2}, DType::f32);
  EXPECT_EQ(upsample2x(x, "bilinear").to_vector(),
            (std::vector<double>{1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3, 3.25, 3.75, 4}));
  // A strided (transposed) input gives the same as its contiguous copy.
  Tensor z = random_f64({2, 3, 5, 4}, -1, 1, 3);
  EXPECT_EQ(upsample2x(z.transpose(2, 3), "bilinear").to_vector(),
            upsample2x(z.transpose(2, 3).contiguous(), "bilinear").to_vector());
}

TEST(Upsample, BilinearMatchesPyTorchFormula) {
  // PyTorch (align_corners=False, scale 1/2): src = max(0, (d + 0.5) / 2 - 0.5),
  // i0 = floor(src), i1 = min(i0 + 1, n - 1), weights 1 - frac and frac.
  auto taps = [](int64_t d, int64_t n, int64_t& i0, int64_t& i1, double& l1) {
    const double s = std::max(0.0, (double(d) + 0.5) * 0.5 - 0.5);
    i0 = int64_t(s);
    i1 = std::min(i0 + 1, n - 1);
    l1 = s - double(i0);
  };
  for (Shape sh : {Shape{2, 3, 5, 7}, Shape{1, 2, 1, 3}, Shape{1, 1, 2, 1}, Shape{1, 1, 3, 2}, Shape{1, 1, 6, 9}}) {
    Tensor x = random_f64(sh, -1, 1, 12);
    std::vector<double> xv = x.to_vector(), ref;
    const int64_t H = sh[2], W = sh[3];
    for (int64_t pl = 0; pl < sh[0] * sh[1]; ++pl)
      for (int64_t oh = 0; oh < 2 * H; ++oh)
        for (int64_t ow = 0; ow < 2 * W; ++ow) {
          int64_t h0, h1, w0, w1;
          double lh, lw;
          taps(oh, H, h0, h1, lh);
          taps(ow, W, w0, w1, lw);
          auto at = [&](int64_t h, int64_t w) { return xv[size_t((pl * H + h) * W + w)]; };
          ref.push_back((1 - lh) * ((1 - lw) * at(h0, w0) + lw * at(h0, w1)) +
                        lh * ((1 - lw) * at(h1, w0) + lw * at(h1, w1)));
        }
    expect_near(upsample2x(x, "bilinear").to_vector(), ref, 1e-15);
    expect_near(upsample2x(x.to(DType::f32), "bilinear").to_vector(), ref, 1e-6);
  }
}

TEST(Upsample, BackwardSumsSources) {
  Tensor x = leaf(Tensor::zeros({1, 2, 3, 5}, DType::f64));
  upsample2x(x, "nearest").backward(Tensor::ones({1, 2, 6, 10}, DType::f64));
  for (double v : x.grad().to_vector()) EXPECT_EQ(v, 4.0);
  // Bilinear weights per axis sum to 1 for every output, so the grad sums to 4 * numel.
  Tensor xb = leaf(Tensor::zeros({1, 2, 3, 5}, DType::f64));
  upsample2x(xb, "bilinear").backward(Tensor::ones({1, 2, 6, 10}, DType::f64));
  double total = 0;
  for (double v : xb.grad().to_vector()) total += v;
  EXPECT_NEAR(total, 4.0 * 30, 1e-12);
}

TEST(Upsample, Gradchecks) {
  for (const char* mode : {"nearest", "bilinear"}) {
    for (Shape s : {Shape{2, 3, 3, 5}, Shape{1, 2, 1, 1}, Shape{1, 1, 4, 2}}) {
      EXPECT_TRUE(gradcheck([mode](const std::vector<Tensor>& in) { return upsample2x(in[0], mode); },
                            {leaf(random_f64(s, -1, 1, 11))}))
          << mode << " " << shape_str(s);
    }
  }
}

TEST(Upsample, Errors) {
  EXPECT_THROW(upsample2x(Tensor::zeros({2, 3, 4}), "nearest"), ShapeError);
  std::string msg = error_of([] { upsample2x(Tensor::zeros({1, 1, 2, 2}), "bicubic"); });
  EXPECT_TRUE(contains(msg, "bicubic")) << msg;
  EXPECT_THROW(upsample2x(Tensor::zeros({1, 1, 2, 2}), "bicubic"), ValueError);
  EXPECT_THROW(upsample2x(Tensor::empty({1, 1, 2, 2}, DType::i64), "nearest"), DTypeError);
}
