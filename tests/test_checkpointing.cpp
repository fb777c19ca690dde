// test_checkpointing.cpp — activation checkpointing (engine/autograd/checkpoint.h,
// engine/nn/checkpoint_plan.h): for every zoo model and every policy, gradients and BN
// running stats are bit-identical to no checkpointing with dropout on, each segment that
// saved something is recomputed exactly once, and checkpointing frees what it should;
// plus the contracts of checkpoint() itself and the policy parser's errors.
// ctest tier: models
// ctest slow: Zoo/CheckpointZoo.*/vgg*
#include <gtest/gtest.h>

#include <cstring>

#include "engine/autograd/checkpoint.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/checkpoint_plan.h"
#include "engine/ops/activation.h"
#include "engine/ops/dropout.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/loss.h"
#include "experiments/plan/memory_report.h"
#include "models/model_zoo.h"
#include "tests/zoo_test_util.h"

using namespace oomlab;
using namespace oomlab::test;

namespace {

struct StepResult {
  std::vector<std::pair<std::string, Tensor>> grads, buffers;   // copies
  CheckpointCounters counters;
  int64_t segments_planned = 0;
};

// One forward + backward (dropout on, training mode) under `policy`, starting from the
// model's `initial` state_dict (the zoo's init is the slow part for VGG: built once).
StepResult run_step(const std::string& name, nn::Module* m, const nn::NamedTensors& initial,
                    const std::string& policy) {
  const ModelConfig c = small_config(name, cpu_device());
  m->load_state_dict(initial);
  m->zero_grad();
  const int64_t batch = 2;
  Tensor x = make_input(name, c, batch), t = make_target(name, c, batch);
  CheckpointPlan plan = plan_checkpoints(*m, x.narrow(0, 0, 1), parse_checkpoint_policy(policy));
  apply_checkpoint_plan(*m, plan);
  manual_seed(1234);
  reset_checkpoint_counters();
  Tensor out = (*m)(x);
  Tensor loss = model_task_kind(name) == TaskKind::segmentation ? pixel_cross_entropy(out, t) : cross_entropy(out, t);
  loss.backward();
  StepResult r;
  r.counters = checkpoint_counters();
  r.segments_planned = int64_t(plan.segments.size());
  for (auto& [n, p] : m->named_parameters())
    r.grads.emplace_back(n, p.grad().defined() ? p.grad().clone() : Tensor());
  for (auto& [n, b] : m->named_buffers()) r.buffers.emplace_back(n, b.clone());
  return r;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

}  // namespace

class CheckpointZoo : public ::testing::TestWithParam<std::string> {};

TEST_P(CheckpointZoo, EveryPolicyIsBitIdenticalAndRecomputesEachSegmentOnce) {
  const std::string name = GetParam();
  nn::ModulePtr m = build_model(name, small_config(name, cpu_device()));
  nn::NamedTensors initial;
  for (auto& [n, t] : m->state_dict()) initial.emplace_back(n, t.clone());
  const StepResult ref = run_step(name, m.get(), initial, "none");
  EXPECT_EQ(ref.counters.segments, 0);
  std::vector<std::string> policies = {"all", "every:2", "sqrt"};
  if (name.rfind("bert", 0) == 0) policies.insert(policies.end(), {"selective", "selective:core"});
  if (name.rfind("resnet", 0) == 0 && name != "resnet50") policies.push_back("selective:BasicBlock");
  for (const std::string& policy : policies) {
    SCOPED_TRACE(name + " --checkpoint " + policy);
    const StepResult r = run_step(name, m.get(), initial, policy);
    ASSERT_EQ(r.grads.size(), ref.grads.size());
    for (size_t i = 0; i < r.grads.size(); ++i)
      EXPECT_TRUE(bit_equal(r.grads[i].second, ref.grads[i].second)) << "grad of " << r.grads[i].first;
    for (size_t i = 0; i < r.buffers.size(); ++i)
      EXPECT_TRUE(bit_equal(r.buffers[i].second, ref.buffers[i].second)) << "buffer " << r.buffers[i].first;
    EXPECT_EQ(r.counters.segments, r.segments_planned);
    EXPECT_EQ(r.counters.recomputes, r.counters.segments_with_saves) << "each segment re-run exactly once";
    if (r.segments_planned > 0 && name != "tiny-ff" && name != "mlp") { EXPECT_GT(r.counters.recomputes, 0); }
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, CheckpointZoo, ::testing::ValuesIn(model_names()), [](const auto& info) {
  std::string s = info.param;
  for (char& ch : s) if (ch == '-') ch = '_';
  return s;
});

TEST(Checkpoint, PlansFollowTheChains) {
  ModelConfig c = small_config("resnet20", cpu_device());
  auto m = build_model("resnet20", c);
  Tensor x1 = make_input("resnet20", c, 1);
  auto chains = checkpoint_chains(*m, x1);
  ASSERT_EQ(chains.size(), 1u);   // layer1.0 .. layer3.2: each block takes the previous output
  EXPECT_EQ(chains[0].size(), 9u);
  EXPECT_EQ(chains[0].front(), "layer1.0");
  EXPECT_EQ(chains[0].back(), "layer3.2");
  auto plan = plan_checkpoints(*m, x1, parse_checkpoint_policy("sqrt"));
  ASSERT_EQ(plan.segments.size(), 2u);   // 3 + 3 + (3, left un-checkpointed)
  EXPECT_EQ(plan.segments[1], (std::vector<std::string>{"layer2.0", "layer2.1", "layer2.2"}));
  plan = plan_checkpoints(*m, x1, parse_checkpoint_policy("every:4"));
  EXPECT_EQ(plan.segments.size(), 2u);   // 4 + 4 + (1)

  ModelConfig b = small_config("bert-mini", cpu_device());
  auto bert = build_model("bert-mini", b);
  Tensor ids = make_input("bert-mini", b, 1);
  chains = checkpoint_chains(*bert, ids);
  ASSERT_EQ(chains.size(), 1u);
  EXPECT_EQ(chains[0].size(), 4u);
  EXPECT_EQ(chains[0][0], "bert.encoder.layer.0");
  plan = plan_checkpoints(*bert, ids, parse_checkpoint_policy("selective"));
  EXPECT_EQ(plan.segments.size(), 8u);   // per layer: attention.self and intermediate
  EXPECT_EQ(plan.segments[0][0], "bert.encoder.layer.0.attention.self");
  EXPECT_EQ(plan.segments[1][0], "bert.encoder.layer.0.intermediate");
  plan = plan_checkpoints(*bert, ids, parse_checkpoint_policy("selective:attention,core"));
  EXPECT_EQ(plan.segments.size(), 4u) << "the core inside a chosen attention is not chosen again";

  // VGG's features: in-place ReLUs never start a segment.
  ModelConfig v = small_config("vgg11", cpu_device());
  auto vgg = build_model("vgg11", v);
  plan = plan_checkpoints(*vgg, make_input("vgg11", v, 1), parse_checkpoint_policy("all"));
  for (const auto& seg : plan.segments)
    EXPECT_FALSE(vgg->submodule(seg[0])->modifies_input()) << seg[0];
}

TEST(Checkpoint, ReducesSavedActivationsOnBert) {
  // bert-mini, batch 4, seq 64: the activations kept after forward shrink under every
  // policy; the segments' saves come back during backward only.
  auto kept_after_forward = [](const std::string& policy) {
    reset_allocators();
    ModelConfig c = default_model_config("bert-mini");
    c.device = meta_device();
    c.seq_len = 64;
    auto m = build_model("bert-mini", c);
    Tensor ids = Tensor::empty({4, 64}, DType::i64, meta_device());
    apply_checkpoint_plan(*m, plan_checkpoints(*m, ids.narrow(0, 0, 1), parse_checkpoint_policy(policy)));
    CachingAllocator& al = allocator_for(meta_device());
    const int64_t before = al.stats().at("allocated_bytes.all.current");
    Tensor out = (*m)(ids);
    return al.stats().at("allocated_bytes.all.current") - before;
  };
  const int64_t none = kept_after_forward("none");
  for (const char* p : {"all", "every:2", "sqrt", "selective", "selective:core"}) {
    SCOPED_TRACE(p);
    EXPECT_LT(kept_after_forward(p), none);
  }
  EXPECT_LT(kept_after_forward("all"), none / 2);
}

TEST(Checkpoint, FunctionFormHandlesInputsWithoutGradAndCountsOnce) {
  Tensor w = Tensor::from_vector({0.5, -1.0, 2.0}, {3}).set_requires_grad(true);
  Tensor x = Tensor::from_vector({1.0, 2.0, -3.0}, {3});   // input needs no grad
  auto f = [&](const Tensor& in) { return relu(mul(in, w)); };
  Tensor ref_grad;
  {
    Tensor y = f(x);
    sum_all(y).backward();
    ref_grad = w.grad().clone();
    w.zero_grad();
  }
  reset_checkpoint_counters();
  Tensor y = checkpoint(f, x, "f");
  sum_all(y).backward();
  EXPECT_EQ(w.grad().to_vector(), ref_grad.to_vector());
  EXPECT_EQ(checkpoint_counters().recomputes, 1);
  EXPECT_EQ(checkpoint_counters().segments_with_saves, 1);
}

TEST(Checkpoint, DropoutMasksReplayAndTheGeneratorMovesOnAsWithout) {
  Tensor x = Tensor::from_vector(std::vector<double>(64, 1.0), {64}).set_requires_grad(true);
  auto f = [](const Tensor& in) { return dropout(mul(in, in), 0.5, true); };
  manual_seed(7);
  sum_all(f(x)).backward();
  std::vector<double> ref = x.grad().to_vector();
  const Generator after_ref = device_generator(cpu_device()).get_state();
  x.zero_grad();
  manual_seed(7);
  Tensor y = checkpoint(f, x);
  const Generator after_fwd = device_generator(cpu_device()).get_state();
  sum_all(y).backward();
  EXPECT_EQ(x.grad().to_vector(), ref);
  EXPECT_EQ(after_fwd.offset, after_ref.offset);
  EXPECT_EQ(device_generator(cpu_device()).get_state().offset, after_ref.offset) << "recompute restores the RNG";
}

TEST(Checkpoint, InPlaceChangeOfTheKeptInputIsAClearError) {
  Tensor w = Tensor::from_vector({1.0, 2.0}, {2}).set_requires_grad(true);
  Tensor a = mul(Tensor::from_vector({1.0, 1.0}, {2}), w);   // non-leaf segment input
  Tensor y = checkpoint([&](const Tensor& in) { return mul(in, w); }, a, "seg");
  Tensor z = add(y, y);
  add_(a, a);   // modifies the segment's kept input
  try {
    sum_all(z).backward();
    FAIL() << "expected AutogradError";
  } catch (const AutogradError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint 'seg'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("modified in place"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, PolicyParserErrors) {
  EXPECT_EQ(parse_checkpoint_policy("every:3").every, 3);
  EXPECT_EQ(parse_checkpoint_policy("selective").spec, "selective:attention,gelu");
  for (const char* bad : {"every:0", "every:", "every:-2", "every:x", "sometimes", "selective:", "selective:a,,b",
                          "All", ""}) {
    SCOPED_TRACE(bad);
    try {
      parse_checkpoint_policy(bad);
      FAIL() << "accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("checkpoint policy"), std::string::npos) << e.what();
    }
  }
  ModelConfig c = small_config("resnet20", cpu_device());
  auto m = build_model("resnet20", c);
  EXPECT_THROW(plan_checkpoints(*m, make_input("resnet20", c, 1), parse_checkpoint_policy("selective")), ValueError);
}

// The meta device reproduces the CPU's allocation trace with checkpointing on: the same
// events (re-run allocations labelled "<block>/recompute"), sizes and peaks.
TEST(Checkpoint, MetaTraceEqualsCpuWithRecompute) {
  for (const auto& run : std::vector<std::pair<std::string, std::string>>{
           {"resnet20", "every:2"}, {"bert-tiny", "selective"}, {"bert-tiny", "all"}}) {
    const std::string name = run.first, policy = run.second;   // (clang 14: no captured bindings)
    SCOPED_TRACE(name + " " + policy);
    auto record = [&](Device dev) {
      reset_allocators();
      CachingAllocator& al = allocator_for(dev);
      const ModelConfig c = small_config(name, dev);
      nn::ModulePtr m = build_model(name, c);
      Tensor x = input_on_device(name, c, 2), t = target_on_device(name, c, 2);
      apply_checkpoint_plan(*m, plan_checkpoints(*m, model_probe_input(name, c), parse_checkpoint_policy(policy)));
      al.record_history(true);
      cross_entropy((*m)(x), t).backward();
      auto trace = al.trace();
      auto stats = al.stats();
      al.record_history(false);
      return std::make_pair(trace, stats);
    };
    auto [cpu, cpu_stats] = record(cpu_device());
    auto [meta, meta_stats] = record(meta_device());
    expect_same_trace(cpu, meta, cpu_stats, meta_stats);
    bool recompute = false;
    for (const TraceEvent& e : cpu) recompute = recompute || e.frame.find("/recompute") != std::string::npos;
    EXPECT_TRUE(recompute) << "re-run allocations are labelled";
  }
}

// budget:SIZE picks, among none and every:K (K from the longest chain down), the first plan
// whose exact meta peak fits: the one with the fewest blocks re-run.
TEST(Checkpoint, BudgetPicksTheLeastRecomputeThatFits) {
  RunSpec spec = RunSpec::for_model("bert-mini");
  spec.seq_len = 64;
  const CheckpointBudgetChoice roomy = choose_checkpoint_budget(spec, 16, "adamw", uint64_t(1) << 40);
  EXPECT_EQ(roomy.policy.spec, "none");
  ASSERT_EQ(roomy.tried.size(), 1u);
  const int64_t none_peak = roomy.predicted_peak_bytes;
  const CheckpointBudgetChoice tight = choose_checkpoint_budget(spec, 16, "adamw", uint64_t(none_peak - 1));
  EXPECT_NE(tight.policy.spec, "none");
  EXPECT_LT(tight.predicted_peak_bytes, none_peak);
  for (size_t i = 0; i + 1 < tight.tried.size(); ++i)   // every plan tried before it did not fit
    EXPECT_GT(tight.tried[i]["peak_bytes"].get<int64_t>(), none_peak - 1) << tight.tried[i].dump();
  spec.checkpoint = tight.policy;
  EXPECT_EQ(estimate_memory(spec, 16, "adamw").peak_allocated_bytes, tight.predicted_peak_bytes);
}
