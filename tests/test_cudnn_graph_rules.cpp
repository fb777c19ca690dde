// test_cudnn_graph_rules.cpp — the host-side rules of the cuDNN graph-API convolution path
// (kernels/cuda/conv_graph_rules.h), which CPU CI can check though the path itself runs only
// on a GPU: which engine configurations are refused (PyTorch's filter for its cuDNN v8
// convolutions, and nondeterministic engines under cuDNN deterministic), the alignment a
// tensor descriptor promises, and how an engine is named in results and traces.
// ctest tier: unit
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/cuda/conv_graph_rules.h"

using namespace oomlab;
using cudnn_graph::EngineNotes;

TEST(CudnnGraphRules, EngineRefusalFollowsPyTorchsFilter) {
  struct Row { EngineNotes notes; DType t; bool tf32; bool refused; };
  const EngineNotes none{}, tc{true, false, false, false}, down{false, true, false, false},
      reduced{false, false, true, false};
  const Row rows[] = {
      {none, DType::f32, false, false},    {none, DType::f16, false, false},
      {tc, DType::f32, true, false},       // TF32 allowed: tensor-core float32 engines run
      {tc, DType::f32, false, true},       // strict fp32 (the legacy API's CUDNN_FMA_MATH)
      {tc, DType::f16, false, false},      // half types: tensor cores whatever the TF32 switch
      {tc, DType::bf16, false, false},     {tc, DType::f64, false, false},
      {down, DType::f32, true, true},      {down, DType::f16, true, true},
      {reduced, DType::f16, true, true},   {reduced, DType::bf16, false, true},
  };
  for (const Row& r : rows) {
    const char* why = cudnn_graph::engine_refusal(r.notes, r.t, r.tf32, false);
    EXPECT_EQ(why != nullptr, r.refused) << dtype_name(r.t) << " tf32=" << r.tf32 << " tc=" << r.notes.tensor_core
                                         << " down=" << r.notes.down_convert_inputs
                                         << " reduced=" << r.notes.reduced_precision_reduction;
  }
  EXPECT_STREQ(cudnn_graph::engine_refusal(tc, DType::f32, false, false), "tensor-core math on float32 with TF32 off");
}

// torch.backends.cudnn.deterministic: engines with the NONDETERMINISTIC note (atomics) are
// refused only under the switch; deterministic ones run either way.
TEST(CudnnGraphRules, DeterministicRefusesOnlyNondeterministicEngines) {
  const EngineNotes atomics{false, false, false, true}, tc_atomics{true, false, false, true}, plain{};
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    EXPECT_EQ(cudnn_graph::engine_refusal(atomics, t, true, false), nullptr) << dtype_name(t);
    EXPECT_EQ(cudnn_graph::engine_refusal(tc_atomics, t, true, false), nullptr) << dtype_name(t);
    EXPECT_STREQ(cudnn_graph::engine_refusal(atomics, t, true, true),
                 "is nondeterministic (cuDNN deterministic is on)");
    EXPECT_EQ(cudnn_graph::engine_refusal(plain, t, true, true), nullptr) << dtype_name(t);
  }
}

TEST(CudnnGraphRules, PointerAlignmentIsTheLargestPowerOfTwoUpTo16) {
  alignas(64) static unsigned char buf[64];
  EXPECT_EQ(cudnn_graph::pointer_alignment(buf), 16);
  EXPECT_EQ(cudnn_graph::pointer_alignment(buf + 32), 16);
  EXPECT_EQ(cudnn_graph::pointer_alignment(buf + 8), 8);
  EXPECT_EQ(cudnn_graph::pointer_alignment(buf + 4), 4);
  EXPECT_EQ(cudnn_graph::pointer_alignment(buf + 6), 2);
  EXPECT_EQ(cudnn_graph::pointer_alignment(buf + 3), 1);
  EXPECT_EQ(cudnn_graph::pointer_alignment(buf + 24), 8);
}

TEST(CudnnGraphRules, EngineTagNamesIndexAndKnobs) {
  EXPECT_EQ(cudnn_graph::engine_tag(12, {}), "eng12");
  EXPECT_EQ(cudnn_graph::engine_tag(0, {{2, 1}, {3, 0}, {19, 64}}), "eng0 k2=1 k3=0 k19=64");
}

// OOMLAB_CUDNN_GRAPH / set_cudnn_graph_api win when set; unset, the graph API plans under
// cuDNN benchmark (faster and lower-peaked than the legacy Find on an H200) and channels_last
// convolutions (faster than the legacy heuristics on an H100), NCHW ones otherwise not.
TEST(CudnnGraphRules, TheGraphApiIsAutoUnderBenchmarkOrChannelsLastUnlessSet) {
  EXPECT_FALSE(cudnn_graph::graph_api_in_effect(-1, false, false));
  EXPECT_TRUE(cudnn_graph::graph_api_in_effect(-1, true, false));
  EXPECT_TRUE(cudnn_graph::graph_api_in_effect(-1, false, true));
  EXPECT_TRUE(cudnn_graph::graph_api_in_effect(1, false, false));
  EXPECT_FALSE(cudnn_graph::graph_api_in_effect(0, true, true));
  EXPECT_FALSE(cudnn_graph::graph_api_in_effect(0, false, true));
}
