// test_ops_conv_direct.cpp — the direct float32 conv2d kernels (kernels/cpu/conv_direct_cpu.cpp)
// through the CPU kernel tables: forward, backward data and backward weight against a
// naive float64 reference on the ResNet-20 layer shapes (small batch) and edge cases (odd
// and non-square sizes, stride 2, C or K not a multiple of 8, batch 1, 1x1 images, several
// backward-weight chunks), bitwise equality across thread counts and between the AVX-512
// and AVX2 loops (where the CPU has AVX-512), and which shapes take the path.
// ctest tier: ops
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "kernels/cpu/conv_direct_avx512.h"
#include "kernels/cpu/conv_direct_cpu.h"
#include "tests/conv_reference_util.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {

struct Case { int64_t N, C, H, W, K, stride; };   // 3x3, padding 1

Conv2dArgs args_for(const Case& c) {
  return conv_ref_args({c.N, c.C, c.H, c.W, c.K, 3, 3, c.stride, c.stride, 1, 1, 1, 1});
}

using Buffers = ConvBuffers<float>;

void check_case(const Case& c) {
  const Conv2dArgs a = args_for(c);
  ASSERT_TRUE(conv_direct_applies(a));
  Buffers b(a, uint64_t(c.N * 1000 + c.C * 100 + c.K + c.H + c.stride));
  b.run(a);
  std::ostringstream os;
  os << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " K" << c.K << " s" << c.stride;
  expect_matches_reference(a, b, 1e-5, 1e-30, os.str());
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
