// test_peak_by_module.cpp — `oomlab estimate --by-module` (experiments/plan/peak_by_module.h):
// the recorder on a hand-made allocation sequence (which block lands in which module and
// category, where the peak is reached, a replay that misses the step's peak is an error),
// then whole estimates: the rows sum to the exact peak for the plain step, a step whose
// first step's gradients exceed its own peak (bf16 with --checkpoint all), ZeRO-3,
// DataParallel and --half --master-weights, and the persistent tensors are where they belong
// (every parameter and its momentum, block-rounded, under its module; the batch as inputs).
// ctest tier: models
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "engine/nn/checkpoint_plan.h"
#include "experiments/plan/memory_report.h"

using namespace oomlab;

namespace {
int64_t rounded(const Tensor& t) { return int64_t((t.nbytes() + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize); }

const ModulePeakBytes* row(const PeakByModule& p, const std::string& module) {
  for (const ModulePeakBytes& m : p.modules)
    if (m.module == module) return &m;
  return nullptr;
}

int64_t category_total(const PeakByModule& p, const std::string& category) {
  int64_t total = 0;
  for (const ModulePeakBytes& m : p.modules) total += m.bytes.at(category);
  return total;
}

MemoryEstimate by_module(const RunSpec& spec, int64_t batch, const std::string& optimizer = "sgd") {
  return estimate_memory(spec, batch, optimizer, 0, false, /*by_module=*/true);
}

void expect_rows_sum_to_peak(const MemoryEstimate& e) {
  ASSERT_TRUE(e.by_module.has_value());
  int64_t total = 0;
  for (const ModulePeakBytes& m : e.by_module->modules) {
    int64_t sum = 0;
    for (const auto& [category, bytes] : m.bytes) sum += bytes;
    EXPECT_EQ(sum, m.total) << m.module;
    total += m.total;
  }
  EXPECT_EQ(total, e.peak_allocated_bytes);
  EXPECT_EQ(e.by_module->peak_allocated_bytes, e.peak_allocated_bytes);
}
}  // namespace

TEST(PeakByModule, AttributesLiveBlocksByOwnerAndPhase) {
  reset_allocators();
  CachingAllocator& al = allocator_for(meta_device());
  PeakByModuleRecorder rec(al);
  rec.arm();
  Tensor weight = Tensor::empty({256, 256}, DType::f32, meta_device());   // 256 KiB, allocated before the window
  rec.before_forward(0, 1);
  Tensor act, grad_in, kept;
  {
    MemoryContext ctx("encoder.block", "fwd");
    act = Tensor::empty({1024}, DType::f32, meta_device());   // 4 KiB
  }
  {
    MemoryContext ctx("encoder.block", "bwd");
    grad_in = Tensor::empty({2048}, DType::f32, meta_device());   // 8 KiB: the peak is reached here
  }
  act = Tensor();
  grad_in = Tensor();
  {
    MemoryContext ctx("head", "fwd");
    kept = Tensor::empty({128}, DType::f32, meta_device());   // after the peak: not in it
  }
  OwnedTensors owned("Net");
  owned.add("parameters", "encoder.proj.weight", weight);
  const int64_t peak = rounded(weight) + 4096 + 8192;
  const PeakByModule p = rec.finish(owned, peak);
  EXPECT_EQ(p.peak_allocated_bytes, peak);
  EXPECT_EQ(p.peak_frame, "encoder.block/bwd");
  ASSERT_EQ(p.modules.size(), 2u);
  EXPECT_EQ(p.modules[0].module, "encoder.proj");   // the largest first
  EXPECT_EQ(p.modules[0].bytes.at("parameters"), rounded(weight));
  const ModulePeakBytes* block = row(p, "encoder.block");
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(block->bytes.at("activations"), 4096);
  EXPECT_EQ(block->bytes.at("backward"), 8192);
  EXPECT_EQ(row(p, "head"), nullptr);
  EXPECT_THROW(rec.finish(owned, peak + 512), InternalError);   // a replay that misses the step's peak
}

TEST(PeakByModule, OwnerOfNames) {
  OwnedTensors owned("ResNet");
  EXPECT_EQ(owned.owner_of("layer1.0.conv1.weight"), "layer1.0.conv1");
  EXPECT_EQ(owned.owner_of("weight"), "ResNet");
  EXPECT_EQ(owned.owner_of("state.fc.bias.momentum_buffer"), "fc");
}

TEST(PeakByModule, RowsSumToTheExactPeakAndHoldTheModelState) {
  RunSpec spec = RunSpec::for_model("resnet18");
  spec.num_classes = 10;
  const MemoryEstimate e = by_module(spec, 4);
  expect_rows_sum_to_peak(e);
  const PeakByModule& p = *e.by_module;
  const ModulePeakBytes* fc = row(p, "fc");   // 512x10 weights (20480 B) and 10 biases (40 B: one 512 B block)
  ASSERT_NE(fc, nullptr);
  const int64_t fc_bytes = 512 * 10 * 4 + 512;
  EXPECT_EQ(fc->bytes.at("parameters"), fc_bytes);
  EXPECT_EQ(fc->bytes.at("optimizer_state"), fc_bytes);   // SGD momentum, one buffer per parameter
  // All of them, in blocks at least their size (a large-pool block is split only when more
  // than 1 MiB would remain: layer4.0.conv1's 4.5 MiB momentum buffer sits in a 5.4 MiB block).
  EXPECT_GE(category_total(p, "parameters"), e.params_bytes);
  EXPECT_LT(category_total(p, "parameters"), e.params_bytes * 11 / 10);
  EXPECT_GE(category_total(p, "optimizer_state"), e.optimizer_state_bytes);
  EXPECT_LT(category_total(p, "optimizer_state"), e.optimizer_state_bytes * 11 / 10);
  const ModulePeakBytes* input = row(p, "input");
  ASSERT_NE(input, nullptr);
  EXPECT_GE(input->bytes.at("inputs"), e.input_bytes);
  EXPECT_GT(category_total(p, "activations"), 0);
}

TEST(PeakByModule, TheStepsOwnPeakWhenCarriedGradientsAreLarger) {
  // Step 1 leaves 1.4 MB more than step 2 ever holds after its zero_grad: the table is the
  // step's own peak, and so are the allocator's peak stats (the results' `memory` block),
  // reset after that zero_grad.
  RunSpec spec = RunSpec::for_model("bert-base");
  spec.seq_len = 128;
  spec.amp = DType::bf16;
  spec.checkpoint = parse_checkpoint_policy("all");
  const MemoryEstimate e = by_module(spec, 4);
  EXPECT_EQ(allocator_for(meta_device()).stat("allocated_bytes.all.peak"), e.peak_allocated_bytes);
  expect_rows_sum_to_peak(e);
}

TEST(PeakByModule, RowsSumToThePeakUnderZeroDataParallelAndHalf) {
  RunSpec zero = RunSpec::for_model("resnet20");
  zero.parallel = ParallelMode::ddp;
  zero.devices = 2;
  zero.zero_stage = 3;
  expect_rows_sum_to_peak(by_module(zero, 4, "adamw"));
  RunSpec dp = RunSpec::for_model("resnet20");
  dp.parallel = ParallelMode::dp;
  dp.devices = 2;
  expect_rows_sum_to_peak(by_module(dp, 8));
  RunSpec half = RunSpec::for_model("resnet20");
  half.half = true;
  half.master_weights = true;
  const MemoryEstimate h = by_module(half, 4);
  expect_rows_sum_to_peak(h);
  EXPECT_GT(category_total(*h.by_module, "optimizer_state"), 0);   // the float32 masters and momentum
}
