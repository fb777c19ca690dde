// test_ops_conv_taps.cpp — the small-plane per-tap GEMM conv2d kernels (kernels/cpu/
// conv_taps_cpu.cpp) through the CPU kernel tables: forward, backward data and backward
// weight in float32 and float64 against a naive float64 reference (ResNet's 2x2 and 4x4
// stages, stride 2, non-square kernels and inputs, dilation, padding that leaves taps with
// no pixel, several image tiles, partial channel chunks), bitwise equality across thread
// counts, which shapes take the path under each GEMM's rule, and Conv2dArgs::cpu_path forcing
// it or im2col.
// ctest tier: ops
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/memory/kernel_choices.h"
#include "kernels/cpu/conv_taps_cpu.h"
#include "tests/conv_reference_util.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {

using Case = ConvGeometry;
template <class T> using Buffers = ConvBuffers<T>;
Conv2dArgs args_for(const Case& c) { return conv_ref_args(c); }
// The tap kernels forced (whatever the measured rule says of the shape).
Conv2dArgs taps_args(const Case& c) {
  Conv2dArgs a = conv_ref_args(c);
  a.cpu_path = CpuConvPath::taps;
  return a;
}

std::string name_of(const Case& c) {
  std::ostringstream os;
  os << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " K" << c.K << " " << c.R << "x" << c.S << " s"
     << c.sh << "," << c.sw << " p" << c.ph << "," << c.pw << " d" << c.dh << "," << c.dw;
  return os.str();
}

template <class T> void check_case(const Case& c) {
  const Conv2dArgs a = taps_args(c);
  const std::string name = name_of(c) + (sizeof(T) == 4 ? " f32" : " f64");
  ASSERT_TRUE(conv_taps_supported(a)) << name;
  Buffers<T> b(a, uint64_t(c.N * 1000 + c.C * 100 + c.K + c.H + c.sh));
  b.run(a);
  expect_matches_reference(a, b, sizeof(T) == 4 ? 1e-5 : 1e-13, 1e-300, name);
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
    const Conv2dArgs a = taps_args(c);
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

TEST(ConvTaps, RunsSmallPlanesOfOneGroupOnly) {
  EXPECT_TRUE(conv_taps_supported(args_for(kCases[0])));
  EXPECT_TRUE(conv_taps_supported(args_for({2, 8, 10, 10, 8, 3, 3, 1, 1, 0, 0, 1, 1})));   // 8x8, unpadded
  EXPECT_FALSE(conv_taps_supported(args_for({2, 8, 9, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1})));    // 81 pixels
  EXPECT_FALSE(conv_taps_supported(args_for({2, 8, 2, 2, 8, 1, 1, 1, 1, 0, 0, 1, 1})));    // 1x1 kernel
  Conv2dArgs grouped = args_for({2, 8, 2, 2, 8, 3, 3, 1, 1, 1, 1, 1, 1});
  grouped.p.groups = 2;
  EXPECT_FALSE(conv_taps_supported(grouped));
  Conv2dArgs nhwc = args_for(kCases[0]);
  nhwc.channels_last = true;
  EXPECT_FALSE(conv_taps_supported(nhwc));
  for (bool own : {false, true}) {
    EXPECT_FALSE(conv_taps_applies(grouped, own));
    EXPECT_FALSE(conv_taps_applies(nhwc, own));
  }
}

TEST(ConvTaps, PaddedShareCountsTheProductsWithZeros) {
  EXPECT_NEAR(conv_padded_share(args_for({2, 8, 2, 2, 8, 3, 3, 1, 1, 1, 1, 1, 1})), 1 - 4.0 / 9, 1e-12);
  EXPECT_NEAR(conv_padded_share(args_for({2, 8, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1})), 1 - (22.0 * 22) / (24 * 24), 1e-12);
  EXPECT_NEAR(conv_padded_share(args_for({2, 8, 14, 14, 8, 3, 3, 2, 2, 1, 1, 1, 1})), 1 - (20.0 * 20) / (21 * 21),
              1e-12);
  EXPECT_EQ(conv_padded_share(args_for({2, 8, 10, 10, 8, 3, 3, 1, 1, 0, 0, 1, 1})), 0.0);
}

// The rule measured with OpenBLAS's GEMMs (Zen 3, AVX2): a quarter padded, or stride 1 and at
// most 2304 products per output.
TEST(ConvTaps, OpenBlasRule) {
  auto applies = [](const Case& c) { return conv_taps_applies(args_for(c), false); };
  EXPECT_TRUE(applies(kCases[0]));
  EXPECT_TRUE(applies({2, 512, 4, 4, 512, 3, 3, 1, 1, 1, 1, 1, 1}));     // 31% padding
  EXPECT_TRUE(applies({2, 512, 4, 4, 512, 3, 3, 2, 2, 1, 1, 1, 1}));     // 4x4 -> 2x2
  EXPECT_TRUE(applies({2, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1, 1, 1}));     // 2304 products
  EXPECT_TRUE(applies({2, 128, 10, 10, 8, 3, 3, 1, 1, 0, 0, 1, 1}));     // unpadded, 1152 products
  EXPECT_FALSE(applies({2, 257, 8, 8, 256, 3, 3, 1, 1, 1, 1, 1, 1}));    // 2313, 16% padding
  EXPECT_FALSE(applies({2, 512, 7, 7, 512, 3, 3, 1, 1, 1, 1, 1, 1}));    // 18% padding
  EXPECT_FALSE(applies({2, 128, 8, 8, 256, 3, 3, 2, 2, 1, 1, 1, 1}));    // 8x8 -> 4x4
}

// The rule measured with the own AVX-512 sgemm (Zen 5): a quarter padded, or an eighth at
// most 2304 products per output.
TEST(ConvTaps, OwnAvx512SgemmRule) {
  auto applies = [](const Case& c) { return conv_taps_applies(args_for(c), true); };
  EXPECT_TRUE(applies(kCases[0]));
  EXPECT_TRUE(applies({2, 512, 2, 2, 512, 3, 3, 1, 1, 1, 1, 1, 1}));     // 56% padding
  EXPECT_TRUE(applies({2, 256, 8, 8, 256, 3, 3, 1, 1, 1, 1, 1, 1}));     // 16%, 2304 products
  EXPECT_TRUE(applies({2, 128, 8, 8, 256, 3, 3, 2, 2, 1, 1, 1, 1}));     // 8x8 -> 4x4, 16%
  EXPECT_FALSE(applies({2, 512, 7, 7, 512, 3, 3, 1, 1, 1, 1, 1, 1}));    // 18%, 4608 products
  EXPECT_FALSE(applies({2, 512, 8, 8, 512, 3, 3, 1, 1, 1, 1, 1, 1}));    // 16%, 4608 products
  EXPECT_FALSE(applies({2, 256, 14, 14, 512, 3, 3, 2, 2, 1, 1, 1, 1}));  // 14x14 -> 7x7, 9%
  EXPECT_FALSE(applies({2, 128, 16, 16, 512, 3, 3, 2, 2, 1, 1, 1, 1}));  // 16x16 -> 8x8, 8%
  EXPECT_FALSE(applies({2, 128, 10, 10, 8, 3, 3, 1, 1, 0, 0, 1, 1}));    // unpadded
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

// Conv2dArgs::cpu_path: im2col forced on a shape the rules give the taps, the taps forced on
// one they give im2col (16x16 -> 8x8, stride 2); each path matches the reference and says so.
// Forced taps on a grouped conv, which they cannot run, take the rule (im2col).
TEST(ConvTaps, ForcedPathIsTakenWhereTheShapesAllowIt) {
  struct Forced { Case c; int groups; CpuConvPath path; const char* choice; };
  const Forced cases[] = {
      {kCases[0], 1, CpuConvPath::im2col, "im2col + "},
      {{2, 70, 16, 16, 66, 3, 3, 2, 2, 1, 1, 1, 1}, 1, CpuConvPath::taps, "tap GEMMs (small planes)"},
      {{2, 70, 2, 2, 66, 3, 3, 1, 1, 1, 1, 1, 1}, 2, CpuConvPath::taps, "im2col + "},
  };
  for (bool own : {false, true}) {
    ASSERT_TRUE(conv_taps_applies(args_for(cases[0].c), own));
    ASSERT_FALSE(conv_taps_applies(args_for(cases[1].c), own));
  }
  for (const Forced& f : cases) {
    Conv2dArgs a = args_for(f.c);
    a.cpu_path = f.path;
    const std::string name = name_of(f.c) + " forced " + (f.path == CpuConvPath::taps ? "taps" : "im2col");
    reset_kernel_choices();
    if (f.groups == 1) {
      Buffers<float> b(a, 11);
      b.run(a);
      expect_matches_reference(a, b, 1e-5, 1e-30, name);
    } else {   // the shared reference is for one group: the choice alone
      a.p.groups = f.groups;
      std::vector<float> x(size_t(a.N * a.C * a.H * a.W), 0.5f), w(size_t(a.K * a.C / 2 * a.R * a.S), 0.25f),
          y(size_t(a.N * a.K * a.P * a.Q));
      a.x = x.data(); a.w = w.data(); a.y = y.data();
      conv2d_forward_kernels().launch(cpu_device(), DType::f32, a);
    }
    std::string choice;
    for (const auto& row : kernel_choices_json())
      if (row["op"] == "conv2d_forward") choice = row["choice"];
    EXPECT_EQ(choice.rfind(f.choice, 0), 0u) << name << ": " << choice;
  }
}
