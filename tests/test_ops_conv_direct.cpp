// test_ops_conv_direct.cpp — the direct float32 conv2d kernels (kernels/cpu/conv_direct_cpu.cpp)
// through the CPU kernel tables: forward, backward data and backward weight against a
// naive float64 reference on the ResNet-20 layer shapes (small batch) and edge cases (odd
// and non-square sizes, stride 2, C or K not a multiple of 8, batch 1, 1x1 images, several
// backward-weight chunks), bitwise equality across thread counts and between the AVX-512
// and AVX2 loops (where the CPU has AVX-512), and which shapes take the path.
// ctest tier: ops
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "engine/ops/conv.h"   // conv2d_output_shape
#include "kernels/conv.h"
#include "kernels/cpu/conv_direct_avx512.h"
#include "kernels/cpu/conv_direct_cpu.h"

using namespace oomlab;

namespace {

struct Case { int64_t N, C, H, W, K, stride; };

Conv2dArgs args_for(const Case& c) {
  Conv2dArgs a{};
  a.N = c.N; a.C = c.C; a.H = c.H; a.W = c.W; a.K = c.K; a.R = 3; a.S = 3;
  a.p.stride_h = a.p.stride_w = c.stride; a.p.pad_h = a.p.pad_w = 1;
  Shape y = conv2d_output_shape({c.N, c.C, c.H, c.W}, {c.K, c.C, 3, 3}, a.p);
  a.P = y[2]; a.Q = y[3];
  return a;
}

std::vector<float> values(size_t n, uint64_t seed) {   // deterministic, in [-1, 1)
  std::vector<float> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& x : v) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    x = float(double(s >> 11) / double(1ull << 53) * 2.0 - 1.0);
  }
  return v;
}

struct Buffers {
  std::vector<float> x, w, dy, y, dx, dw;
  explicit Buffers(const Conv2dArgs& a, uint64_t seed)
      : x(values(size_t(a.N * a.C * a.H * a.W), seed)), w(values(size_t(a.K * a.C * 9), seed + 1)),
        dy(values(size_t(a.N * a.K * a.P * a.Q), seed + 2)), y(dy.size(), NAN), dx(x.size(), NAN),
        dw(w.size(), NAN) {}
  void run(Conv2dArgs a) {   // NaN-filled outputs: every element must be overwritten
    a.x = x.data(); a.w = w.data(); a.y = y.data(); a.dy = dy.data(); a.dx = dx.data(); a.dw = dw.data();
    conv2d_forward_kernels().launch(cpu_device(), DType::f32, a);
    conv2d_backward_data_kernels().launch(cpu_device(), DType::f32, a);
    conv2d_backward_weight_kernels().launch(cpu_device(), DType::f32, a);
  }
};

// |got - ref| <= rtol * sum|terms| + 1e-30 per element (sum|terms| from the reference).
void expect_close(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& mag,
                  const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - ref[i]), 1e-5 * mag[i] + 1e-30)
        << what << " element " << i << ": " << got[i] << " vs " << ref[i];
}

void check_case(const Case& c) {
  const Conv2dArgs a = args_for(c);
  ASSERT_TRUE(conv_direct_applies(a));
  Buffers b(a, uint64_t(c.N * 1000 + c.C * 100 + c.K + c.H + c.stride));
  b.run(a);
  std::vector<double> y(b.y.size(), 0), ym(y.size(), 0), dx(b.dx.size(), 0), dxm(dx.size(), 0),
      dw(b.dw.size(), 0), dwm(dw.size(), 0);
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t k = 0; k < a.K; ++k)
      for (int64_t p = 0; p < a.P; ++p)
        for (int64_t q = 0; q < a.Q; ++q)
          for (int64_t ci = 0; ci < a.C; ++ci)
            for (int64_t r = 0; r < 3; ++r)
              for (int64_t s = 0; s < 3; ++s) {
                const int64_t h = p * c.stride - 1 + r, ww = q * c.stride - 1 + s;
                if (h < 0 || h >= a.H || ww < 0 || ww >= a.W) continue;
                const size_t yi = size_t(((n * a.K + k) * a.P + p) * a.Q + q);
                const size_t xi = size_t(((n * a.C + ci) * a.H + h) * a.W + ww);
                const size_t wi = size_t(((k * a.C + ci) * 3 + r) * 3 + s);
                const double xv = b.x[xi], wv = b.w[wi], gv = b.dy[yi];
                y[yi] += xv * wv; ym[yi] += std::fabs(xv * wv);
                dx[xi] += gv * wv; dxm[xi] += std::fabs(gv * wv);
                dw[wi] += gv * xv; dwm[wi] += std::fabs(gv * xv);
              }
  std::ostringstream os;
  os << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " K" << c.K << " s" << c.stride;
  const std::string name = os.str();
  expect_close(b.y, y, ym, name + " forward");
  expect_close(b.dx, dx, dxm, name + " backward data");
  expect_close(b.dw, dw, dwm, name + " backward weight");
}

}  // namespace

TEST(ConvDirect, ResNet20ShapesMatchFloat64Reference) {
  for (const Case& c : {Case{2, 16, 28, 28, 16, 1}, Case{2, 16, 28, 28, 32, 2}, Case{2, 32, 14, 14, 32, 1},
                        Case{2, 32, 14, 14, 64, 2}, Case{3, 64, 7, 7, 64, 1}})
    check_case(c);
}

TEST(ConvDirect, EdgeCasesMatchFloat64Reference) {
  for (const Case& c : {Case{1, 3, 7, 7, 5, 1}, Case{1, 3, 7, 7, 5, 2}, Case{2, 5, 5, 9, 12, 1},
                        Case{2, 5, 5, 9, 12, 2}, Case{1, 9, 9, 5, 20, 2}, Case{2, 13, 4, 11, 24, 1},
                        Case{1, 1, 1, 1, 1, 1}, Case{2, 2, 1, 1, 3, 2}, Case{1, 4, 2, 3, 8, 2},
                        Case{2, 64, 6, 6, 64, 2}, Case{1, 7, 17, 16, 40, 1}, Case{1, 8, 3, 18, 17, 2},
                        Case{37, 3, 5, 5, 9, 1},     // several backward-weight chunks, a partial last one
                        Case{21, 16, 10, 9, 16, 2}})
    check_case(c);
}

TEST(ConvDirect, BitwiseIndependentOfThreadCount) {
  const int saved = omp_get_max_threads();
  for (const Case& c : {Case{24, 16, 28, 28, 16, 1}, Case{20, 16, 28, 28, 32, 2}, Case{40, 64, 7, 7, 64, 1},
                        Case{33, 32, 14, 14, 64, 2}}) {
    const Conv2dArgs a = args_for(c);
    Buffers one(a, 5), many(a, 5);
    omp_set_num_threads(1);
    one.run(a);
    omp_set_num_threads(std::max(3, saved));
    many.run(a);
    omp_set_num_threads(saved);
    EXPECT_TRUE(one.y == many.y) << "forward, K " << c.K;
    EXPECT_TRUE(one.dx == many.dx) << "backward data, K " << c.K;
    EXPECT_TRUE(one.dw == many.dw) << "backward weight, K " << c.K;
  }
}

TEST(ConvDirect, Avx512LoopsAreBitwiseTheAvx2Loops) {
  const bool avx512 = conv_direct_avx512_enabled();
  if (!avx512) GTEST_SKIP() << "this CPU has no AVX-512F: only the AVX2 loops run here";
  for (const Case& c : {Case{2, 16, 28, 28, 16, 1}, Case{2, 16, 28, 28, 32, 2}, Case{3, 64, 7, 7, 64, 1},
                        Case{1, 3, 7, 7, 5, 1}, Case{2, 5, 5, 9, 12, 2}, Case{1, 7, 17, 16, 40, 1},
                        Case{2, 13, 4, 11, 24, 1}, Case{37, 3, 5, 5, 9, 1}, Case{2, 64, 6, 6, 64, 2},
                        Case{1, 1, 1, 1, 1, 1}, Case{21, 16, 10, 9, 48, 2}}) {
    const Conv2dArgs a = args_for(c);
    Buffers wide(a, 9), narrow(a, 9);
    wide.run(a);
    set_conv_direct_avx512(false);
    narrow.run(a);
    set_conv_direct_avx512(true);
    EXPECT_TRUE(wide.y == narrow.y) << "forward, C " << c.C << " K " << c.K << " stride " << c.stride;
    EXPECT_TRUE(wide.dx == narrow.dx) << "backward data, C " << c.C << " K " << c.K << " stride " << c.stride;
    EXPECT_TRUE(wide.dw == narrow.dw) << "backward weight, C " << c.C << " K " << c.K << " stride " << c.stride;
  }
}

TEST(ConvDirect, ShapesThatTakeThePath) {
  EXPECT_TRUE(conv_direct_applies(args_for({128, 16, 28, 28, 16, 1})));
  EXPECT_TRUE(conv_direct_applies(args_for({128, 32, 14, 14, 64, 2})));
  EXPECT_FALSE(conv_direct_applies(args_for({32, 128, 28, 28, 128, 1})));   // ResNet-18: im2col + GEMM
  EXPECT_FALSE(conv_direct_applies(args_for({32, 64, 28, 28, 128, 2})));
  Conv2dArgs a = args_for({2, 16, 8, 8, 16, 1});
  a.p.groups = 2;
  EXPECT_FALSE(conv_direct_applies(a));
  a = args_for({2, 16, 8, 8, 16, 1});
  a.p.dil_h = a.p.dil_w = 2; a.p.pad_h = a.p.pad_w = 2;
  EXPECT_FALSE(conv_direct_applies(a));
  a = args_for({2, 16, 8, 8, 16, 3});
  EXPECT_FALSE(conv_direct_applies(a));
}
