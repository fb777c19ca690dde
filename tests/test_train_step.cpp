// test_train_step.cpp — the training step in phases and its StepStrategy hooks, the seam the
// technique issues plug into: phase order, micro-batches (consecutive slices; K slices with
// the loss divided by K equal one batch for a BN-free model, in float64), skipping the
// update, and an out-of-memory handled by a strategy (the step is skipped, nothing updated,
// the graph released) or not (it propagates).
// ctest tier: models
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/elementwise.h"
#include "engine/optim/optimizer.h"
#include "engine/train/train_step.h"
#include "models/model_zoo.h"

using namespace oomlab;

namespace {
struct StepRun {
  nn::ModulePtr model;
  std::unique_ptr<Optimizer> opt;
  Tensor x, y;
};

// The MLP (no BatchNorm) in float64 on `dev`, a batch of 8 with fixed inputs.
StepRun make_run(Device dev = cpu_device(), int64_t batch = 8) {
  ModelConfig cfg = default_model_config("mlp");
  cfg.dtype = DType::f64;
  cfg.device = dev;
  cfg.seed = 4;
  StepRun r;
  r.model = build_model("mlp", cfg);
  ParamGroup g;
  g.params = r.model->named_parameters();
  g.lr = 0.1;
  g.momentum = 0.9;
  r.opt = make_optimizer("sgd", {g});
  std::vector<double> xs(size_t(batch * 28 * 28));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = double(i % 17) / 17.0 - 0.5;
  r.x = Tensor::from_vector(xs, {batch, 1, 28, 28}, DType::f64, dev);
  std::vector<int64_t> ys;
  for (int64_t i = 0; i < batch; ++i) ys.push_back(i % 10);
  r.y = Tensor::from_vector_i64(ys, {batch}, dev);
  return r;
}

std::vector<double> weights(const nn::Module& m) {
  std::vector<double> out;
  for (auto& [n, p] : m.named_parameters()) {
    std::vector<double> v = p.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Records the order of the hooks; optionally splits the batch, scales the loss, skips.
struct Recorder final : StepStrategy {
  int64_t k = 1;
  bool step = true;
  std::vector<std::string> events;
  const char* name() const override { return "recorder"; }
  int64_t micro_batches(int64_t) const override { return k; }
  void before_forward(int64_t m, int64_t) override { events.push_back("fwd" + std::to_string(m)); }
  void before_backward(int64_t m, int64_t) override { events.push_back("bwd" + std::to_string(m)); }
  bool before_optimizer_step(Optimizer&) override {
    events.push_back("step?");
    return step;
  }
  void after_optimizer_step(Optimizer&, bool stepped) override { events.push_back(stepped ? "stepped" : "skipped"); }
};

struct OomHandler final : StepStrategy {
  std::string phase;
  const char* name() const override { return "skip-on-oom"; }
  OomAction on_out_of_memory(const OutOfMemoryError&, const char* p, int64_t, int64_t) override {
    phase = p;
    return OomAction::skip;
  }
};
}  // namespace

TEST(TrainStep, PhasesRunInOrderAroundEachMicroBatch) {
  StepRun r = make_run();
  Recorder rec;
  rec.k = 3;   // 8 samples: 3 + 3 + 2
  TrainStep step(*r.model, *r.opt, {&rec});
  StepOutput out = step.run(r.x, r.y);
  EXPECT_EQ(rec.events, (std::vector<std::string>{"fwd0", "bwd0", "fwd1", "bwd1", "fwd2", "bwd2", "step?", "stepped"}));
  EXPECT_FALSE(out.skipped);
  EXPECT_EQ(r.opt->step_count(), 1);
  EXPECT_GT(out.memory.step_peak, 0);
}

// Micro-batches are consecutive slices and TrainStep weights each one's loss by its share
// (8 samples as 2 + 2 + 2 + 2): without BatchNorm the update equals the one-batch step
// (float64) and the reported loss is the batch mean.
TEST(TrainStep, MicroBatchesWithLossOverKEqualTheWholeBatch) {
  StepRun whole = make_run(), split = make_run();
  const StepOutput a = train_step(*whole.model, *whole.opt, whole.x, whole.y);
  Recorder rec;
  rec.k = 4;
  const StepOutput b = TrainStep(*split.model, *split.opt, {&rec}).run(split.x, split.y);
  const std::vector<double> wa = weights(*whole.model), wb = weights(*split.model);
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) ASSERT_NEAR(wa[i], wb[i], 1e-12) << i;
  EXPECT_NEAR(a.loss.item(), b.loss.item(), 1e-12);
  EXPECT_EQ(a.correct, b.correct);
}

TEST(TrainStep, AStrategyCanSkipTheUpdate) {
  StepRun r = make_run();
  const std::vector<double> before = weights(*r.model);
  Recorder rec;
  rec.step = false;
  StepOutput out = TrainStep(*r.model, *r.opt, {&rec}).run(r.x, r.y);
  EXPECT_EQ(rec.events.back(), "skipped");
  EXPECT_EQ(weights(*r.model), before);
  EXPECT_EQ(r.opt->step_count(), 0);
  EXPECT_TRUE(out.loss.defined());   // the step ran, only the update was skipped
}

// An out-of-memory during the step on a capped device (meta: the same allocations as a
// real device, no arithmetic): with a handler the step is skipped (no update, no optimizer
// state, grads and graph released: the allocator back where it was); without one it
// propagates. With room, the same step then runs normally.
TEST(TrainStep, OutOfMemoryIsHandledByAStrategyOrPropagates) {
  reset_allocators();
  {   // every tensor dies before the allocators are reset again
    ModelConfig cfg = default_model_config("mlp");
    cfg.device = meta_device();
    nn::ModulePtr model = build_model("mlp", cfg);
    ParamGroup g;
    g.params = model->named_parameters();
    g.lr = 0.1;
    g.momentum = 0.9;
    auto opt = make_optimizer("sgd", {g});
    const int64_t batch = 65536;   // activations far beyond the parameters' segments
    Tensor x = Tensor::empty({batch, 1, 28, 28}, DType::f32, meta_device());
    Tensor y = Tensor::empty({batch}, DType::i64, meta_device());
    CachingAllocator& al = allocator_for(meta_device());
    const int64_t allocated = al.stat("allocated_bytes.all.current");
    al.set_capacity(size_t(al.stat("reserved_bytes.all.current")) + (8 << 20));
    OomHandler handler;
    StepOutput out = TrainStep(*model, *opt, {&handler}).run(x, y);
    EXPECT_TRUE(out.skipped);
    EXPECT_EQ(handler.phase, "forward");
    EXPECT_NE(out.skip_reason.find("out of memory in forward"), std::string::npos) << out.skip_reason;
    EXPECT_EQ(opt->step_count(), 0);
    EXPECT_TRUE(opt->state_tensors().empty());
    for (auto& [n, p] : model->named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;
    EXPECT_EQ(al.stat("allocated_bytes.all.current"), allocated);
    EXPECT_EQ(al.stat("num_ooms"), 1);
    EXPECT_THROW(TrainStep(*model, *opt).run(x, y), OutOfMemoryError);
    EXPECT_EQ(al.stat("allocated_bytes.all.current"), allocated);
    al.set_capacity(0);
    out = TrainStep(*model, *opt, {&handler}).run(x, y);
    EXPECT_FALSE(out.skipped);
    EXPECT_EQ(opt->step_count(), 1);
    EXPECT_EQ(opt->state_tensors().size(), model->named_parameters().size());
  }
  reset_allocators();
}

TEST(TrainStep, ImpossibleMicroBatchCountIsAClearError) {
  StepRun r = make_run(cpu_device(), 2);
  Recorder rec;
  rec.k = 3;
  try {
    TrainStep(*r.model, *r.opt, {&rec}).run(r.x, r.y);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot split a batch of 2 into 3 micro-batches"), std::string::npos)
        << e.what();
  }
}
