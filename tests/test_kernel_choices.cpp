// test_kernel_choices.cpp — kernel_choices.h on the CPU convolution: each call is counted
// under its (MemoryContext frame, op, choice), first seen first; the direct 3x3 kernels and
// im2col + GEMM are named as they run; the innermost recording op span gets a call's choice
// (the Chrome trace's span args), an outer span only what ran outside its inner ones;
// reset_allocators() clears the counts.
// ctest tier: unit
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/memory/caching_allocator.h"
#include "engine/memory/kernel_choices.h"
#include "engine/memory/memory_export.h"
#include "engine/ops/conv.h"
#include "engine/ops/elementwise.h"
#include "tests/gradcheck.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
// 3x3, pad 1, 16 -> 16 channels in float32: the direct kernels (conv_direct_applies).
Tensor direct_conv() {
  Tensor x = random_f64({2, 16, 8, 8}, -1, 1, 1).to(DType::f32),
         w = random_f64({16, 16, 3, 3}, -1, 1, 2).to(DType::f32);
  Conv2dParams p;
  p.pad_h = p.pad_w = 1;
  return conv2d(x, w, Tensor(), p);
}
// 5x5 with a 12x12 output (past conv_taps_applies' 64 pixels): im2col and a GEMM.
Tensor gemm_conv() {
  Tensor x = random_f64({2, 3, 16, 16}, -1, 1, 3).to(DType::f32), w = random_f64({4, 3, 5, 5}, -1, 1, 4).to(DType::f32);
  return conv2d(x, w, Tensor());
}
}  // namespace

TEST(KernelChoices, CountedPerFrameOpAndChoiceInFirstSeenOrder) {
  reset_allocators();
  {
    MemoryContext ctx("convA", "fwd");
    direct_conv();
    direct_conv();
  }
  {
    MemoryContext ctx("convB", "fwd");
    gemm_conv();
  }
  const nlohmann::json rows = kernel_choices_json();
  ASSERT_EQ(rows.size(), 2u) << rows.dump();
  EXPECT_EQ(rows[0]["frame"], "convA/fwd");
  EXPECT_EQ(rows[0]["op"], "conv2d_forward");
  EXPECT_EQ(rows[0]["choice"], "direct 3x3 kernels");
  EXPECT_EQ(rows[0]["calls"], 2);
  EXPECT_EQ(rows[1]["frame"], "convB/fwd");
  EXPECT_NE(rows[1]["choice"].get<std::string>().find("im2col + "), std::string::npos) << rows[1];
  EXPECT_EQ(rows[1]["calls"], 1);
  reset_allocators();
  EXPECT_TRUE(kernel_choices_json().empty());
}

TEST(KernelChoices, TheInnermostRecordingSpanGetsTheChoice) {
  OpProfiler::take();
  OpProfiler::enable(true);
  {
    OpSpanScope outer("outer");
    {
      OpSpanScope inner("inner");
      direct_conv();
      direct_conv();   // the same choice twice: listed once
    }
    gemm_conv();
  }
  OpProfiler::enable(false);
  const std::vector<OpSpan> spans = OpProfiler::take();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "inner");
  EXPECT_EQ(spans[0].kernels, std::vector<std::string>{"conv2d_forward: direct 3x3 kernels"});
  EXPECT_EQ(spans[1].name, "outer");
  ASSERT_EQ(spans[1].kernels.size(), 1u);
  EXPECT_EQ(spans[1].kernels[0].rfind("conv2d_forward: im2col + ", 0), 0u) << spans[1].kernels[0];
  // Without a recording span a choice is only counted.
  direct_conv();
  EXPECT_TRUE(OpProfiler::take().empty());
}
