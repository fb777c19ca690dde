// test_flop_counter.cpp — the FLOPs the matrix-class kernels count as they launch
// (engine/core/flop_counter.h): a linear layer's forward and backward and a convolution's,
// each against its closed form, on the CPU and on meta alike; nesting; and the steady step
// of `estimate` (MemoryEstimate::step_flops: linear in the batch, the same under autocast);
// the kinds (a GEMM is gemm, a convolution conv) and the launches every kernel adds.
// ctest tier: unit
#include <gtest/gtest.h>

#include "engine/core/flop_counter.h"
#include "engine/ops/conv.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "experiments/plan/memory_report.h"

using namespace oomlab;

namespace {
Tensor leaf(Shape s, Device d) {
  Tensor t = Tensor::full(s, 0.5, DType::f32, d);
  t.set_requires_grad(true);
  return t;
}
}  // namespace

TEST(FlopCounter, LinearForwardAndBackwardAreThreeProducts) {
  for (Device d : {cpu_device(), meta_device()}) {
    const int64_t B = 8, I = 16, O = 4;
    Tensor x = leaf({B, I}, d), w = leaf({O, I}, d);
    FlopCounter c;
    Tensor y = linear(x, w, Tensor());
    EXPECT_DOUBLE_EQ(c.flops(DType::f32), 2.0 * B * I * O) << d.str();
    sum_all(y).backward();
    EXPECT_DOUBLE_EQ(c.flops(DType::f32), 3 * 2.0 * B * I * O) << d.str();   // + dX + dW
    EXPECT_DOUBLE_EQ(c.total(), c.flops(DType::f32));
  }
}

TEST(FlopCounter, ConvolutionCountsEachPass) {
  for (Device d : {cpu_device(), meta_device()}) {
    const int64_t N = 2, C = 3, H = 8, K = 4, R = 3;
    Tensor x = leaf({N, C, H, H}, d), w = leaf({K, C, R, R}, d);
    FlopCounter c;
    Tensor y = conv2d(x, w, Tensor(), Conv2dParams{1, 1, 1, 1, 1, 1, 1});
    const double fwd = 2.0 * N * K * H * H * C * R * R;   // padding 1 keeps 8 x 8
    EXPECT_DOUBLE_EQ(c.flops(DType::f32), fwd) << d.str();
    sum_all(y).backward();
    EXPECT_DOUBLE_EQ(c.flops(DType::f32), 3 * fwd) << d.str();
  }
}

TEST(FlopCounter, KindsAndLaunchesAreCountedOnEveryDevice) {
  for (Device d : {cpu_device(), meta_device()}) {
    Tensor x = leaf({2, 3, 8, 8}, d), w = leaf({4, 3, 3, 3}, d), a = leaf({5, 6}, d), b = leaf({7, 6}, d);
    FlopCounter c;
    Tensor y = conv2d(x, w, Tensor(), Conv2dParams{1, 1, 1, 1, 1, 1, 1});
    EXPECT_EQ(c.launches(), 1) << d.str();
    EXPECT_DOUBLE_EQ(c.flops(MatrixKind::conv, DType::f32), 2.0 * 2 * 4 * 8 * 8 * 3 * 9) << d.str();
    Tensor z = linear(a, b, Tensor());
    EXPECT_EQ(c.launches(), 2) << d.str();
    EXPECT_DOUBLE_EQ(c.flops(MatrixKind::gemm, DType::f32), 2.0 * 5 * 7 * 6) << d.str();
    EXPECT_DOUBLE_EQ(c.flops(MatrixKind::attention, DType::f32), 0) << d.str();
    Tensor s = add(z, z);   // a bandwidth-bound kernel: a launch, no FLOPs
    EXPECT_EQ(c.launches(), 3) << d.str();
    EXPECT_DOUBLE_EQ(c.total(), 2.0 * 2 * 4 * 8 * 8 * 3 * 9 + 2.0 * 5 * 7 * 6) << d.str();
  }
  EXPECT_STREQ(matrix_kind_name(MatrixKind::conv_channels_last), "conv_channels_last");
}

TEST(FlopCounter, CountersNestAndOnlyTheInnermostCounts) {
  Tensor x = leaf({2, 2}, meta_device()), w = leaf({2, 2}, meta_device());
  FlopCounter outer;
  {
    FlopCounter inner;
    linear(x, w, Tensor());
    EXPECT_DOUBLE_EQ(inner.total(), 16.0);
  }
  EXPECT_DOUBLE_EQ(outer.total(), 0.0);
  linear(x, w, Tensor());
  EXPECT_DOUBLE_EQ(outer.total(), 16.0);
}

TEST(FlopCounter, EstimateCountsTheSteadyStep) {
  RunSpec s = RunSpec::for_model("tiny-ff");
  const MemoryEstimate one = estimate_memory(s, 4, "sgd"), two = estimate_memory(s, 8, "sgd");
  ASSERT_EQ(one.step_flops.count("float32"), 1u);
  EXPECT_GT(one.step_flops.at("float32"), 0);
  EXPECT_DOUBLE_EQ(two.step_flops.at("float32"), 2 * one.step_flops.at("float32"));   // linear in the batch
  s.amp = DType::bf16;
  const MemoryEstimate amp = estimate_memory(s, 4, "sgd");
  EXPECT_DOUBLE_EQ(amp.step_flops.at("bfloat16"), one.step_flops.at("float32"));   // the same work, in bf16
  // the step's cost: the same FLOPs by kind, launches independent of the batch, bytes linear-ish
  EXPECT_DOUBLE_EQ(one.step_cost.flops.at("gemm").at("float32"), one.step_flops.at("float32"));
  EXPECT_GT(one.step_cost.launches, 0);
  EXPECT_EQ(two.step_cost.launches, one.step_cost.launches);
  EXPECT_GT(two.step_cost.allocated_bytes, one.step_cost.allocated_bytes);
}
