// test_ops_conv_taps.cpp — the small-plane per-tap GEMM conv2d kernels (kernels/cpu/
// conv_taps_cpu.cpp) through the CPU kernel tables: forward, backward data and backward
// weight in float32 and float64 against a naive float64 reference (ResNet's 2x2 and 4x4
// stages, stride 2, non-square kernels and inputs, dilation, padding that leaves taps with
// no pixel, several image tiles, partial channel chunks), bitwise equality across thread
// counts, and which shapes take the path.
// ctest tier: ops
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/memory/kernel_choices.h"
#include "engine/ops/conv.h"   // conv2d_output_shape
#include "kernels/conv.h"
#include "kernels/cpu/conv_taps_cpu.h"

using namespace oomlab;

namespace {

struct Case { int64_t N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw; };

Conv2dArgs args_for(const Case& c) {
  Conv2dArgs a{};
  a.N = c.N; a.C = c.C; a.H = c.H; a.W = c.W; a.K = c.K; a.R = c.R; a.S = c.S;
  a.p.stride_h = c.sh; a.p.stride_w = c.sw; a.p.pad_h = c.ph; a.p.pad_w = c.pw; a.p.dil_h = c.dh; a.p.dil_w = c.dw;
  Shape y = conv2d_output_shape({c.N, c.C, c.H, c.W}, {c.K, c.C, c.R, c.S}, a.p);
  a.P = y[2]; a.Q = y[3];
  return a;
}

std::string name_of(const Case& c) {
  std::ostringstream os;
  os << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " K" << c.K << " " << c.R << "x" << c.S << " s"
     << c.sh << "," << c.sw << " p" << c.ph << "," << c.pw << " d" << c.dh << "," << c.dw;
  return os.str();
}

template <class T> std::vector<T> values(size_t n, uint64_t seed) {   // deterministic, in [-1, 1)
  std::vector<T> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (T& x : v) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    x = T(double(s >> 11) / double(1ull << 53) * 2.0 - 1.0);
  }
  return v;
}

template <class T> constexpr DType dtype_of() { return sizeof(T) == 4 ? DType::f32 : DType::f64; }

template <class T> struct Buffers {
  std::vector<T> x, w, dy, y, dx, dw;
  Buffers(const Conv2dArgs& a, uint64_t seed)
      : x(values<T>(size_t(a.N * a.C * a.H * a.W), seed)), w(values<T>(size_t(a.K * a.C * a.R * a.S), seed + 1)),
        dy(values<T>(size_t(a.N * a.K * a.P * a.Q), seed + 2)), y(dy.size(), NAN), dx(x.size(), NAN),
        dw(w.size(), NAN) {}
  void run(Conv2dArgs a) {   // NaN-filled outputs: every element must be overwritten
    a.x = x.data(); a.w = w.data(); a.y = y.data(); a.dy = dy.data(); a.dx = dx.data(); a.dw = dw.data();
    conv2d_forward_kernels().launch(cpu_device(), dtype_of<T>(), a);
    conv2d_backward_data_kernels().launch(cpu_device(), dtype_of<T>(), a);
    conv2d_backward_weight_kernels().launch(cpu_device(), dtype_of<T>(), a);
  }
};

// |got - ref| <= rtol * sum|terms| + 1e-300 per element (sum|terms| from the reference).
template <class T>
void expect_close(const std::vector<T>& got, const std::vector<double>& ref, const std::vector<double>& mag,
                  double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - ref[i]), rtol * mag[i] + 1e-300)
        << what << " element " << i << ": " << got[i] << " vs " << ref[i];
}

template <class T> void check_case(const Case& c) {
  const Conv2dArgs a = args_for(c);
  const std::string name = name_of(c) + (sizeof(T) == 4 ? " f32" : " f64");
  ASSERT_TRUE(conv_taps_applies(a)) << name;
  Buffers<T> b(a, uint64_t(c.N * 1000 + c.C * 100 + c.K + c.H + c.sh));
  b.run(a);
  std::vector<double> y(b.y.size(), 0), ym(y.size(), 0), dx(b.dx.size(), 0), dxm(dx.size(), 0),
      dw(b.dw.size(), 0), dwm(dw.size(), 0);
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t k = 0; k < a.K; ++k)
      for (int64_t p = 0; p < a.P; ++p)
        for (int64_t q = 0; q < a.Q; ++q)
          for (int64_t ci = 0; ci < a.C; ++ci)
            for (int64_t r = 0; r < a.R; ++r)
              for (int64_t s = 0; s < a.S; ++s) {
                const int64_t h = p * c.sh - c.ph + r * c.dh, ww = q * c.sw - c.pw + s * c.dw;
                if (h < 0 || h >= a.H || ww < 0 || ww >= a.W) continue;
                const size_t yi = size_t(((n * a.K + k) * a.P + p) * a.Q + q);
                const size_t xi = size_t(((n * a.C + ci) * a.H + h) * a.W + ww);
                const size_t wi = size_t(((k * a.C + ci) * a.R + r) * a.S + s);
                const double xv = b.x[xi], wv = b.w[wi], gv = b.dy[yi];
                y[yi] += xv * wv; ym[yi] += std::fabs(xv * wv);
                dx[xi] += gv * wv; dxm[xi] += std::fabs(gv * wv);
                dw[wi] += gv * xv; dwm[wi] += std::fabs(gv * xv);
              }
  const double rtol = sizeof(T) == 4 ? 1e-5 : 1e-13;
  expect_close(b.y, y, ym, rtol, name + " forward");
  expect_close(b.dx, dx, dxm, rtol, name + " backward data");
  expect_close(b.dw, dw, dwm, rtol, name + " backward weight");
}

// Channel counts above 64 keep float32 3x3 pad-1 shapes off the direct kernels.
const Case kCases[] = {
    {4, 72, 2, 2, 80, 3, 3, 1, 1, 1, 1, 1, 1},     // ResNet layer4: 2x2, partial channel chunks
    {3, 70, 4, 4, 66, 3, 3, 1, 1, 1, 1, 1, 1},     // layer3: 4x4
    {3, 70, 4, 4, 66, 3, 3, 2, 2, 1, 1, 1, 1},     // stride 2: 4x4 -> 2x2
    {2, 65, 3, 5, 67, 3, 3, 2, 2, 1, 1, 1, 1},     // stride 2: 3x5 -> 2x3
    {2, 66, 3, 5, 68, 3, 5, 1, 1, 1, 2, 1, 1},     // non-square kernel and input
    {2, 33, 5, 5, 90, 3, 3, 1, 1, 1, 1, 2, 2},     // dilation 2: 3x3
    {2, 20, 4, 4, 70, 3, 3, 1, 1, 0, 0, 1, 1},     // no padding: 2x2, no product with zeros
    {3, 70, 1, 1, 65, 3, 3, 1, 1, 1, 1, 1, 1},     // 1x1 image: only the centre tap reaches a pixel
    {2, 9, 2, 3, 70, 5, 5, 1, 2, 2, 3, 1, 1},      // taps with no in-bounds row or column
    {1, 3, 6, 6, 130, 2, 2, 3, 3, 1, 1, 1, 1},     // stride larger than the kernel
    {130, 5, 4, 4, 70, 3, 3, 1, 1, 1, 1, 1, 1},    // 130 images of 16 pixels: two tiles
    {2, 100, 8, 8, 70, 3, 3, 1, 1, 1, 1, 1, 1},    // 8x8, stride 1, 900 products per output
};

}  // namespace

TEST(ConvTaps, Float32MatchesFloat64Reference) {
  for (const Case& c : kCases) check_case<float>(c);
}

TEST(ConvTaps, Float64MatchesFloat64Reference) {
  for (const Case& c : kCases) check_case<double>(c);
}

TEST(ConvTaps, BitwiseIndependentOfThreadCount) {
  const int saved = omp_get_max_threads();
  for (const Case& c : {kCases[0], kCases[3], kCases[4], kCases[10]}) {
    const Conv2dArgs a = args_for(c);
    Buffers<float> one(a, 5), many(a, 5);
    omp_set_num_threads(1);
    one.run(a);
    omp_set_num_threads(std::max(3, saved));
    many.run(a);
    omp_set_num_threads(saved);
    EXPECT_TRUE(one.y == many.y) << name_of(c) << " forward";
    EXPECT_TRUE(one.dx == many.dx) << name_of(c) << " backward data";
    EXPECT_TRUE(one.dw == many.dw) << name_of(c) << " backward weight";
  }
}

TEST(ConvTaps, TakesSmallPlanesOfOneGroupOnly) {
  EXPECT_TRUE(conv_taps_applies(args_for(kCases[0])));
  EXPECT_TRUE(conv_taps_applies(args_for({2, 512, 4, 4, 512, 3, 3, 1, 1, 1, 1, 1, 1})));   // 31% padding
  EXPECT_TRUE(conv_taps_applies(args_for({2, 512, 4, 4, 512, 3, 3, 2, 2, 1, 1, 1, 1})));   // 4x4 -> 2x2
  EXPECT_TRUE(conv_taps_applies(args_for({2, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1, 1, 1})));   // 2304 products
  EXPECT_FALSE(conv_taps_applies(args_for({2, 257, 8, 8, 256, 3, 3, 1, 1, 1, 1, 1, 1})));  // 2313, 16% padding
  EXPECT_FALSE(conv_taps_applies(args_for({2, 128, 8, 8, 256, 3, 3, 2, 2, 1, 1, 1, 1})));  // 8x8 -> 4x4
  EXPECT_FALSE(conv_taps_applies(args_for({2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1})));      // 81 pixels
  EXPECT_FALSE(conv_taps_applies(args_for({2, 8, 2, 2, 8, 1, 1, 1, 1, 0, 0, 1, 1})));      // 1x1 kernel
  Conv2dArgs grouped = args_for({2, 8, 2, 2, 8, 3, 3, 1, 1, 1, 1, 1, 1});
  grouped.p.groups = 2;
  EXPECT_FALSE(conv_taps_applies(grouped));
  Conv2dArgs nhwc = args_for(kCases[0]);
  nhwc.channels_last = true;
  EXPECT_FALSE(conv_taps_applies(nhwc));
}

TEST(ConvTaps, KernelChoiceNamesThePath) {
  const Conv2dArgs a = args_for(kCases[0]);
  Buffers<float> b(a, 7);
  reset_kernel_choices();
  b.run(a);
  bool seen = false;
  for (const auto& row : kernel_choices_json())
    if (row["op"] == "conv2d_backward_weight") seen = row["choice"] == "tap GEMMs (small planes)";
  EXPECT_TRUE(seen);
}
