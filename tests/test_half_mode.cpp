// test_half_mode.cpp — `--half` (model.half() with BatchNorm kept float32) and
// `--master-weights` (Apex O2): the conversion keeps tensor identity and BN's float32; the
// failures the source warns about in plain half mode (float16 gradients of a small loss
// underflow to zero; updates below half an ulp of a weight are lost; an overflowing forward
// poisons the weights) and how master weights + the loss scaler cure each; the meta device
// reproduces the CPU's allocation trace in both modes; the --half pre-flight refuses a
// device whose backend lacks float16 kernels.
// ctest tier: models
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "engine/autograd/grad_mode.h"
#include "engine/core/dispatch.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/layers.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/optim/optimizer.h"
#include "engine/train/half_mode.h"
#include "engine/train/mixed_precision.h"
#include "engine/train/train_step.h"
#include "experiments/plan/memory_report.h"
#include "models/model_zoo.h"
#include "tests/zoo_test_util.h"

using namespace oomlab;
using namespace oomlab::test;

namespace {
Tensor randn(const Shape& s, uint64_t seed, double scale = 1.0) {
  Generator g{seed, 0};
  std::vector<double> v(size_t(shape_numel(s)));
  for (double& f : v) f = scale * (2.0 * g.next_unit() - 1.0);
  return Tensor::from_vector(v, s);
}

std::unique_ptr<Optimizer> sgd_over(const nn::NamedTensors& params, double lr) {
  ParamGroup g;
  g.params = params;
  g.lr = lr;
  g.momentum = 0.0;
  return make_optimizer("sgd", {g});
}

bool all_finite(const Tensor& t) {
  for (double v : t.to_vector())
    if (!std::isfinite(v)) return false;
  return true;
}
}  // namespace

TEST(HalfMode, ConvertsEverythingButBatchNormInPlace) {
  const ModelConfig c = small_config("resnet20", cpu_device());
  nn::ModulePtr m = build_model("resnet20", c);
  std::map<std::string, const TensorImpl*> before;
  for (const auto& [n, t] : m->state_dict()) before[n] = t.impl();
  std::set<std::string> bn_tensors;   // BatchNorm2d's weight, bias and running stats
  for (const auto& [name, mod] : m->named_modules())
    if (std::strcmp(mod->type_name(), "BatchNorm2d") == 0)
      for (const auto& [n, t] : mod->state_dict()) bn_tensors.insert(name + "." + n);
  ASSERT_FALSE(bn_tensors.empty());
  half_model(*m, DType::f16);
  int halves = 0;
  for (const auto& [n, t] : m->state_dict()) {
    EXPECT_EQ(t.impl(), before.at(n)) << n << ": layers keep their handles";
    const bool bn = bn_tensors.count(n) > 0;
    if (n.find("num_batches_tracked") != std::string::npos) EXPECT_EQ(t.dtype(), DType::i64) << n;
    else if (bn) EXPECT_EQ(t.dtype(), DType::f32) << n;
    else {
      EXPECT_EQ(t.dtype(), DType::f16) << n;
      ++halves;
    }
  }
  EXPECT_GT(halves, 10);
  // BN takes the float16 activations with its float32 weight and statistics.
  Tensor x = make_input("resnet20", c, 2).to(DType::f16);
  Tensor y = (*m)(x);
  EXPECT_EQ(y.dtype(), DType::f16);
  EXPECT_TRUE(all_finite(y));
}

// The three failures of plain model.half() and their cures.
TEST(HalfMode, SmallGradientsUnderflowWithoutMasterWeightsAndTheScaler) {
  Tensor x = randn({64, 32}, 1);
  Tensor w0 = randn({16, 32}, 2, 0.1);
  // dL/dy = 1e-6 / 1024 ~ 1e-9: below float16's smallest subnormal (6e-8).
  auto small_loss = [](const Tensor& y) { return scale(mean_all(y), 1e-6); };
  Tensor ref_w = w0.clone().set_requires_grad(true);
  small_loss(linear(x, ref_w, Tensor())).backward();
  const std::vector<double> ref = ref_w.grad().to_vector();

  // Plain --half: everything float16, the loss too.
  Tensor w16 = w0.to(DType::f16).set_requires_grad(true);
  small_loss(linear(x.to(DType::f16), w16, Tensor())).backward();
  int zeros = 0;
  for (double v : w16.grad().to_vector()) zeros += v == 0.0;
  EXPECT_EQ(zeros, int(ref.size())) << "every float16 gradient underflows to zero";

  // Scaling the loss but unscaling the float16 gradients in float16 flushes them again.
  Tensor w16s = w0.to(DType::f16).set_requires_grad(true);
  GradScaler half_scaler(parse_loss_scale("dynamic", true));
  half_scaler.backward_root(small_loss(linear(x.to(DType::f16), w16s, Tensor()).to(DType::f32)), 0, 1).backward();
  EXPECT_TRUE(half_scaler.before_optimizer_step(*sgd_over({{"w", w16s}}, 0.1)));
  int flushed = 0;
  for (double v : w16s.grad().to_vector()) flushed += std::abs(v) < 6.1e-5 * 0.5;
  EXPECT_GT(flushed, int(ref.size()) / 2) << "unscaled in float16 the gradients fall back below the normal range";

  // --half --master-weights: float32 logits and loss, scaled; unscaled in float32.
  nn::Linear lin(32, 16, /*bias=*/false);
  lin.weight.copy_(w0);
  half_model(lin, DType::f16);
  MasterWeights masters(lin);
  HalfIO io(DType::f16, /*float32_outputs=*/true);
  GradScaler scaler(parse_loss_scale("dynamic", true));
  auto opt = sgd_over(masters.parameters(), 0.1);
  scaler.backward_root(small_loss(io.model_output(lin(io.model_input(x)))), 0, 1).backward();
  ASSERT_TRUE(masters.before_optimizer_step(*opt));
  ASSERT_TRUE(scaler.before_optimizer_step(*opt));
  EXPECT_FALSE(lin.weight.grad().defined()) << "the float16 gradient moved into the master's";
  const Tensor g = masters.parameters()[0].second.grad();
  ASSERT_EQ(g.dtype(), DType::f32);
  const std::vector<double> cured = g.to_vector();
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) err += (cured[i] - ref[i]) * (cured[i] - ref[i]), norm += ref[i] * ref[i];
  EXPECT_GT(norm, 0.0);
  EXPECT_LT(std::sqrt(err / norm), 5e-3) << "the float32 gradients to half precision";
}

TEST(HalfMode, UpdatesBelowHalfAnUlpAreLostWithoutMasterWeights) {
  // Weights at 0.5: float16 values just below are 2^-12 ~ 2.4e-4 apart, and each SGD update
  // (1e-3 x 0.1 = 1e-4) is less than half of that.
  auto run = [](bool with_masters) {
    nn::Linear lin(8, 4, /*bias=*/false);
    lin.weight.fill_(0.5);
    half_model(lin, DType::f16);
    std::optional<MasterWeights> masters;
    if (with_masters) masters.emplace(lin);
    auto opt = sgd_over(masters ? masters->parameters() : lin.named_parameters(), 1e-3);
    for (int step = 0; step < 20; ++step) {
      lin.weight.set_grad(Tensor::full(lin.weight.shape(), 0.1, DType::f16));
      if (masters) masters->before_optimizer_step(*opt);
      opt->step();
      if (masters) masters->after_optimizer_step(*opt, true);
    }
    return lin.weight.to_vector()[0];
  };
  EXPECT_EQ(run(false), 0.5) << "plain --half: 20 updates of 1e-4 are each rounded away";
  EXPECT_NEAR(run(true), 0.498, 2.5e-4) << "the float32 master accumulates them (0.5 - 20 x 1e-4, in float16)";
}

TEST(HalfMode, AnOverflowPoisonsPlainHalfWeightsAndTheScalerSkipsTheStep) {
  const Tensor huge = Tensor::full({4, 32}, 60000.0);   // float16's max is 65504: the logits overflow
  const Tensor target = Tensor::from_vector_i64({0, 1, 2, 3}, {4});
  auto model = [] {
    auto lin = std::make_shared<nn::Linear>(32, 4);
    lin->weight.fill_(0.5);
    half_model(*lin, DType::f16);
    return lin;
  };
  {   // plain --half: nothing checks the gradients; the update writes NaN into the weights
    auto lin = model();
    HalfIO io(DType::f16, false);
    auto opt = sgd_over(lin->named_parameters(), 0.1);
    TrainStep step(*lin, *opt, {&io});
    StepOutput out = step.run(huge, target, false);
    EXPECT_FALSE(std::isfinite(out.loss.item()));
    EXPECT_FALSE(all_finite(lin->weight)) << "the weights are destroyed";
  }
  {   // --master-weights + dynamic scaler: found inf, step skipped, scale halved, weights intact
    auto lin = model();
    HalfIO io(DType::f16, true);
    MasterWeights masters(*lin);
    GradScaler scaler(parse_loss_scale("dynamic", true));
    auto opt = sgd_over(masters.parameters(), 0.1);
    TrainStep step(*lin, *opt, {&io, &masters, &scaler});
    step.run(huge, target, false);
    EXPECT_TRUE(scaler.found_inf());
    EXPECT_EQ(scaler.scale(), 32768.0f);
    EXPECT_TRUE(all_finite(lin->weight));
    EXPECT_EQ(lin->weight.to_vector()[0], 0.5) << "no update happened";
    // Ordinary batches: the scale backs off from any gradient overflow and training goes on.
    const Tensor x = randn({4, 32}, 7);
    int stepped = 0;
    for (int i = 0; i < 12; ++i) {
      step.run(x, target, false);
      stepped += !scaler.found_inf();
    }
    EXPECT_GT(stepped, 0);
    EXPECT_TRUE(all_finite(lin->weight));
    EXPECT_NE(lin->weight.to_vector()[0], 0.5) << "the model learns again";
  }
}

TEST(HalfMode, MetaTraceEqualsCpuForHalfAndMasterWeightSteps) {
  for (const std::string name : {"resnet20", "bert-tiny", "unet-small", "tiny-ff"}) {
    for (bool with_masters : {false, true}) {
      SCOPED_TRACE(name + (with_masters ? " --half --master-weights" : " --half"));
      auto record = [&](Device dev) {
        reset_allocators();
        CachingAllocator& al = allocator_for(dev);
        const ModelConfig c = small_config(name, dev);
        nn::ModulePtr m = build_model(name, c);
        Tensor x = input_on_device(name, c, 2), t = target_on_device(name, c, 2);
        al.record_history(true);
        half_model(*m, DType::f16);
        HalfIO io(DType::f16, with_masters);
        std::optional<MasterWeights> masters;
        if (with_masters) masters.emplace(*m);
        ParamGroup g;
        g.params = masters ? masters->parameters() : m->named_parameters();
        g.lr = 1e-3;
        auto opt = make_optimizer("adam", {g});
        // A small static scale keeps the CPU off the skip path (meta has no values to overflow).
        GradScaler scaler(parse_loss_scale("static:8", true));
        std::vector<StepStrategy*> strategies = {&io};
        if (masters) strategies.push_back(&*masters), strategies.push_back(&scaler);
        TrainStep step(*m, *opt, strategies);
        step.run(x, t, true);
        EXPECT_FALSE(scaler.found_inf());
        auto trace = al.trace();
        auto stats = al.stats();
        al.record_history(false);
        return std::make_pair(trace, stats);
      };
      auto [cpu, cpu_stats] = record(cpu_device());
      auto [meta, meta_stats] = record(meta_device());
      expect_same_trace(cpu, meta, cpu_stats, meta_stats);
    }
  }
}

// Model state per parameter with Adam: plain half 2 + 2 + 2 x 2 bytes; master weights add
// a float32 copy and a float32 gradient (the float16 gradient is freed when moved).
TEST(HalfMode, EstimateCountsHalfAndMasterState) {
  RunSpec s = RunSpec::for_model("tiny-ff");
  s.half = true;
  const MemoryEstimate plain = estimate_memory(s, 8, "adam");
  s.master_weights = true;
  s.loss_scale = parse_loss_scale("dynamic", true);
  const MemoryEstimate master = estimate_memory(s, 8, "adam");
  const double p = double(plain.params);
  EXPECT_DOUBLE_EQ(double(plain.params_bytes + plain.grads_bytes + plain.optimizer_state_bytes) / p, 8.0);
  EXPECT_EQ(plain.master_weights_bytes, 0);
  EXPECT_DOUBLE_EQ(double(master.master_weights_bytes) / p, 4.0);
  EXPECT_DOUBLE_EQ(double(master.params_bytes + master.grads_bytes + master.optimizer_state_bytes +
                          master.master_weights_bytes) / p, 2.0 + 4.0 + 4.0 + 8.0);
}

// The pre-flight: a step on meta emulating the target backend. Every op has a float16 CPU
// kernel; the CUDA backend has no float16 pixel cross-entropy (its backward keeps a weight
// in 16 bits it cannot hold), so a plain --half UNet planned for cuda is refused before any
// work, while with master weights (float32 logits) it is served. A CPU-only build has no
// cuda kernel at all.
TEST(HalfMode, PreflightRefusesABackendWithoutFloat16Kernels) {
  RunSpec s = RunSpec::for_model("unet-small");
  s.half = true;
  EXPECT_NO_THROW(check_half_servable(s, 2, "sgd", DeviceType::cpu));
  try {
    check_half_servable(s, 2, "sgd", DeviceType::cuda);
    FAIL() << "expected a refusal";
  } catch (const ValueError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--half: unet-small cannot train in float16 on cuda: op '"), std::string::npos) << m;
    EXPECT_NE(m.find(built_with_cuda() ? "op 'pixel_cross_entropy' has no cuda/float16 kernel" : "has no cuda/"),
              std::string::npos) << m;
  }
  EXPECT_EQ(meta_emulated_device_type(), DeviceType::cpu) << "the guard is released";
  if (built_with_cuda()) {
    s.master_weights = true;
    s.loss_scale = parse_loss_scale("dynamic", true);
    EXPECT_NO_THROW(check_half_servable(s, 2, "sgd", DeviceType::cuda));
  }
}
