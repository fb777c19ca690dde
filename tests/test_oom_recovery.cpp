// test_oom_recovery.cpp — `--on-oom raise|skip|split` (engine/train/oom_recovery.h).
// Step level: an out-of-memory error raised by the real allocator (a capped device) in the
// forward, backward or optimizer phase is skipped with nothing updated (parameters,
// gradients, optimizer state, allocator back where it was), or split into micro-batches
// whose update equals the unsplit batch's (float64 MLP), on the CPU and meta devices; split
// gives up with a clear error at one-sample micro-batches and in the optimizer phase.
// Run level (`train`): bert-mini on synthetic-seq with rare long sequences on a capped
// device: raise dies, skip loses exactly the samples of the batches holding a long
// sequence, split loses none; an impossible split is refused before any work.
// ctest tier: models
// ctest slow: OomRun.RaiseDiesSkipLosesTheLongBatchesSplitLosesNone
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/data/dataloader.h"
#include "engine/data/synthetic_seq.h"
#include "engine/memory/caching_allocator.h"
#include "engine/optim/optimizer.h"
#include "engine/train/accumulation.h"
#include "engine/train/oom_recovery.h"
#include "engine/train/train_step.h"
#include "experiments/plan/memory_report.h"
#include "experiments/train/train_command.h"
#include "models/model_zoo.h"

using namespace oomlab;

namespace {
// The float64 MLP on 1x8x8 inputs with a fixed batch on `dev` (meta: shapes only).
struct StepSetup {
  nn::ModulePtr model;
  std::unique_ptr<Optimizer> opt;
  Tensor x, y;
};

StepSetup make_run(Device dev, int64_t batch) {
  ModelConfig cfg = default_model_config("mlp");
  cfg.dtype = DType::f64;
  cfg.device = dev;
  cfg.in_channels = 1;
  cfg.height = cfg.width = 8;
  cfg.seed = 3;
  StepSetup r;
  r.model = build_model("mlp", cfg);
  ParamGroup g;
  g.params = r.model->named_parameters();
  g.lr = 0.1;
  g.momentum = 0.9;
  r.opt = make_optimizer("sgd", {g});
  std::vector<double> xs(size_t(batch * 64));
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = double(i % 13) / 13.0 - 0.5;
  std::vector<int64_t> ys;
  for (int64_t i = 0; i < batch; ++i) ys.push_back(i % 10);
  if (dev.is_meta()) {
    r.x = Tensor::empty({batch, 1, 8, 8}, DType::f64, dev);
    r.y = Tensor::empty({batch}, DType::i64, dev);
  } else {
    r.x = Tensor::from_vector(xs, {batch, 1, 8, 8}, DType::f64, dev);
    r.y = Tensor::from_vector_i64(ys, {batch}, dev);
  }
  return r;
}

std::vector<double> weights(const nn::Module& m) {
  std::vector<double> out;
  for (auto& [n, p] : m.named_parameters()) {
    if (p.device().is_meta()) continue;
    const std::vector<double> v = p.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

std::vector<double> optimizer_state(const Optimizer& opt) {
  std::vector<double> out;
  for (auto& [n, t] : opt.state_tensors()) {
    if (t.device().is_meta()) continue;
    const std::vector<double> v = t.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// Asks the real (capped) allocator for more than it has, in one phase, while the step runs
// as fewer than `until_micro` micro-batches: the pressure a large batch would put there.
struct MemoryHog final : StepStrategy {
  std::string phase;
  int64_t until_micro = INT64_MAX;
  Device dev;
  const char* name() const override { return "hog"; }
  void hog(const char* p, int64_t micro_count) {
    if (phase == p && micro_count < until_micro) Tensor::empty({int64_t(1) << 36}, DType::f64, dev);
  }
  void before_forward(int64_t, int64_t n) override { hog("forward", n); }
  void before_backward(int64_t, int64_t n) override { hog("backward", n); }
  bool before_optimizer_step(Optimizer& opt) override {
    hog("optimizer", 0);
    return true;
  }
};

class OomPhases : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override { reset_allocators(); }
  void TearDown() override { reset_allocators(); }
};

// skip in each phase, on a step after a normal one (so optimizer state exists): the step is
// skipped and nothing moved.
TEST_P(OomPhases, SkipLeavesParametersStateAndAllocatorUntouched) {
  const auto& [device, phase] = GetParam();
  const Device dev = device == "meta" ? meta_device() : cpu_device();
  {
    StepSetup r = make_run(dev, 16);
    OomRecovery skip(OnOom::skip);
    MemoryHog hog;
    hog.dev = dev;
    TrainStep step(*r.model, *r.opt, {&hog, &skip});
    ASSERT_FALSE(step.run(r.x, r.y).skipped);
    CachingAllocator& al = allocator_for(dev);
    al.set_capacity(uint64_t(al.stat("reserved_bytes.all.current")) + (64 << 20));
    const std::vector<double> w = weights(*r.model), st = optimizer_state(*r.opt);
    const int64_t allocated = al.stat("allocated_bytes.all.current");
    hog.phase = phase;
    const StepOutput out = step.run(r.x, r.y);
    EXPECT_TRUE(out.skipped);
    EXPECT_EQ(out.skip_phase, phase);
    EXPECT_NE(out.skip_reason.find("out of memory in " + phase), std::string::npos) << out.skip_reason;
    EXPECT_EQ(r.opt->step_count(), 1);
    EXPECT_EQ(weights(*r.model), w);
    EXPECT_EQ(optimizer_state(*r.opt), st);
    for (auto& [n, p] : r.model->named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;
    // The grads of the first step were released by zero_grad(set_to_none) at this step's start.
    EXPECT_LE(al.stat("allocated_bytes.all.current"), allocated);
    EXPECT_EQ(al.stat("num_ooms"), 1);
    hog.phase.clear();   // with the pressure gone the same step runs
    EXPECT_FALSE(step.run(r.x, r.y).skipped);
    EXPECT_EQ(r.opt->step_count(), 2);
  }
}

// raise: the error propagates naming the phase, the update is not half-done.
TEST_P(OomPhases, RaisePropagatesNamingThePhase) {
  const auto& [device, phase] = GetParam();
  const Device dev = device == "meta" ? meta_device() : cpu_device();
  {
    StepSetup r = make_run(dev, 16);
    OomRecovery raise(OnOom::raise);
    MemoryHog hog;
    hog.dev = dev;
    hog.phase = phase;
    allocator_for(dev).set_capacity(512u << 20);
    const std::vector<double> w = weights(*r.model);
    try {
      TrainStep(*r.model, *r.opt, {&hog, &raise}).run(r.x, r.y);
      FAIL() << "no OutOfMemoryError";
    } catch (const OutOfMemoryError& e) {
      EXPECT_NE(std::string(e.what()).find("in the " + phase + " phase"), std::string::npos) << e.what();
    }
    EXPECT_EQ(weights(*r.model), w);
    EXPECT_EQ(r.opt->step_count(), 0);
    for (auto& [n, p] : r.model->named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;
  }
}

INSTANTIATE_TEST_SUITE_P(DevicesAndPhases, OomPhases,
                         ::testing::Combine(::testing::Values("cpu", "meta"),
                                            ::testing::Values("forward", "backward", "optimizer")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// split in forward / backward: the batch is rerun as 2, then 4 micro-batches; the update is
// bit-identical to accumulating 4 micro-batches and equals the whole batch's (float64).
TEST(OomSplit, HalvesUntilItFitsAndEqualsTheWholeBatch) {
  for (const char* phase : {"forward", "backward"}) {
    reset_allocators();
    {
      StepSetup whole = make_run(cpu_device(), 16), acc4 = make_run(cpu_device(), 16),
                split = make_run(cpu_device(), 16);
      train_step(*whole.model, *whole.opt, whole.x, whole.y);
      GradientAccumulation four(4);
      TrainStep(*acc4.model, *acc4.opt, {&four}).run(acc4.x, acc4.y);
      allocator_for(cpu_device()).set_capacity(512u << 20);
      OomRecovery recover(OnOom::split);
      MemoryHog hog;
      hog.dev = cpu_device();
      hog.phase = phase;
      hog.until_micro = 4;
      const StepOutput out = TrainStep(*split.model, *split.opt, {&hog, &recover}).run(split.x, split.y);
      EXPECT_FALSE(out.skipped);
      EXPECT_EQ(out.micro_batches, 4) << phase;
      EXPECT_EQ(out.oom_splits, 2) << phase;
      EXPECT_EQ(weights(*split.model), weights(*acc4.model)) << phase;
      const std::vector<double> a = weights(*whole.model), b = weights(*split.model);
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-12) << phase << " " << i;
    }
  }
  reset_allocators();
}

// A real capacity, no injected pressure: the whole batch of 4096 does not fit, its halves do.
TEST(OomSplit, FitsACappedDeviceByHalving) {
  auto reserved_peak = [](int64_t k) {
    reset_allocators();
    StepSetup r = make_run(meta_device(), 4096);
    GradientAccumulation acc(k);
    TrainStep(*r.model, *r.opt, {&acc}).run(r.x, r.y, false);
    return allocator_for(meta_device()).stat("reserved_bytes.all.peak");
  };
  const int64_t whole = reserved_peak(1), halves = reserved_peak(2);
  ASSERT_LT(halves, whole);
  reset_allocators();
  {
    StepSetup r = make_run(meta_device(), 4096);
    allocator_for(meta_device()).set_capacity(uint64_t(halves + whole) / 2);
    OomRecovery recover(OnOom::split);
    const StepOutput out = TrainStep(*r.model, *r.opt, {&recover}).run(r.x, r.y);
    EXPECT_FALSE(out.skipped);
    EXPECT_EQ(out.micro_batches, 2);
    EXPECT_EQ(out.oom_splits, 1);
    EXPECT_EQ(r.opt->step_count(), 1);
  }
  reset_allocators();
}

// An OOM inside the model (bert's attention scores) while a parent's side inputs (residual,
// key/value, mask) hold the graph: the abandoned forward leaves nothing allocated behind.
TEST(OomSkip, AnOomInsideTheModelReleasesTheWholeAttempt) {
  reset_allocators();
  {
    ModelConfig cfg = default_model_config("bert-mini");
    cfg.device = meta_device();
    cfg.seq_len = 512;
    nn::ModulePtr model = build_model("bert-mini", cfg);
    ParamGroup g;
    g.params = model->named_parameters();
    g.lr = 0.1;
    auto opt = make_optimizer("adamw", {g});
    const Tensor x = Tensor::empty({16, 512}, DType::i64, meta_device());
    const Tensor y = Tensor::empty({16}, DType::i64, meta_device());
    CachingAllocator& al = allocator_for(meta_device());
    const int64_t before = al.stat("allocated_bytes.all.current");
    // Room for the parameters' gradients and AdamW's state, not for the activations.
    al.set_capacity(uint64_t(al.stat("reserved_bytes.all.current")) + 4 * uint64_t(before) + (256u << 20));
    OomRecovery skip(OnOom::skip);
    const StepOutput out = TrainStep(*model, *opt, {&skip}).run(x, y);
    ASSERT_TRUE(out.skipped);
    EXPECT_EQ(out.skip_phase, "forward");
    EXPECT_EQ(al.stat("allocated_bytes.all.current"), before);
  }
  reset_allocators();
}

TEST(OomSplit, GivesUpAtOneSampleAndInTheOptimizerPhase) {
  reset_allocators();
  {
    StepSetup r = make_run(cpu_device(), 4);
    allocator_for(cpu_device()).set_capacity(512u << 20);
    OomRecovery recover(OnOom::split);
    MemoryHog hog;
    hog.dev = cpu_device();
    hog.phase = "forward";   // at every size
    try {
      TrainStep(*r.model, *r.opt, {&hog, &recover}).run(r.x, r.y);
      FAIL() << "no OutOfMemoryError";
    } catch (const OutOfMemoryError& e) {
      EXPECT_NE(std::string(e.what()).find("cannot be split further (4 micro-batches of one sample"),
                std::string::npos) << e.what();
    }
    hog.phase = "optimizer";   // the update's memory does not depend on the batch
    EXPECT_THROW(TrainStep(*r.model, *r.opt, {&hog, &recover}).run(r.x, r.y), OutOfMemoryError);
    EXPECT_EQ(r.opt->step_count(), 0);
  }
  reset_allocators();
}

TEST(OnOom, ParsesTheThreePoliciesOnly) {
  EXPECT_EQ(parse_on_oom("raise"), OnOom::raise);
  EXPECT_EQ(parse_on_oom("skip"), OnOom::skip);
  EXPECT_EQ(parse_on_oom("split"), OnOom::split);
  EXPECT_THROW(parse_on_oom("retry"), ValueError);
}

// ---- whole runs: a slim bert-mini, synthetic-seq with rare 512-token sequences ----------

// The reserved peak of one training step (exact, meta) at `batch` sequences of `seq` tokens.
int64_t step_reserved_peak(const RunSpec& c, int64_t seq, int64_t batch) {
  RunSpec s = RunSpec::for_model(c.model);
  s.arch = c.arch;
  s.seq_len = seq;
  return estimate_memory(s, batch, "adamw").peak_reserved_bytes;
}

// Capped between a batch of long sequences and a quarter of one, above a regular batch.
RunSpec long_seq_run(const std::string& on_oom, Device dev) {
  RunSpec c;
  c.model = "bert-mini";
  c.arch.hidden = 64;
  c.arch.layers = 2;
  c.arch.heads = 2;
  c.dataset = "synthetic-seq";
  c.seq_len = 64;
  c.long_seq_prob = 0.01;
  c.long_seq_len = 512;
  c.synthetic_size = 512;
  c.batch = 16;
  c.steps = 24;
  c.optimizer = "adamw";
  c.device = dev;
  const int64_t whole = step_reserved_peak(c, 512, 16), quarter = step_reserved_peak(c, 512, 4);
  c.device_memory = uint64_t(whole + quarter) / 2;
  EXPECT_GT(int64_t(c.device_memory), step_reserved_peak(c, 64, 16));
  c.eval_batches = 1;
  c.quiet = true;
  c.on_oom = parse_on_oom(on_oom);
  return c;
}

// Batches (of the first `batches` in the run's order) holding a sample of long_seq_len.
std::vector<int64_t> long_batches(const RunSpec& c, int64_t batches) {
  SyntheticSeqOptions o;
  o.size = c.synthetic_size + std::max<int64_t>(c.synthetic_size / 4, c.batch);
  o.max_len = c.seq_len;
  o.long_prob = c.long_seq_prob;
  o.long_len = c.long_seq_len;
  o.seed = c.seed + 1;
  SyntheticSequenceDataset all(o);
  SubsetDataset train_set(std::shared_ptr<Dataset>(&all, [](Dataset*) {}), 0, c.synthetic_size, "train");
  DataLoader loader(train_set, c.batch, true, true, c.seed, 0);
  std::vector<int64_t> out;
  HostBatch b;
  for (int64_t i = 0; i < batches;) {
    if (!loader.next(b)) continue;
    if (b.shape[1] == c.long_seq_len) out.push_back(i);
    ++i;
  }
  return out;
}

TEST(OomRun, RaiseDiesSkipLosesTheLongBatchesSplitLosesNone) {
  for (const Device dev : {meta_device(), cpu_device()}) {
    RunSpec raise = long_seq_run("raise", dev), skip = long_seq_run("skip", dev), split = long_seq_run("split", dev);
    const std::vector<int64_t> longs = long_batches(skip, skip.steps + 8);
    ASSERT_GE(longs.size(), 2u) << dev.str();   // enough for the counts to mean something
    if (dev.is_cpu()) raise.steps = skip.steps = split.steps = longs[0] + 2;   // the CPU computes: one long batch
    EXPECT_THROW(train(raise), OutOfMemoryError) << dev.str();
    const nlohmann::json s = train(skip)["metrics"], p = train(split)["metrics"];
    // skip: every batch with a long sequence among those the run consumed is lost.
    int64_t consumed = skip.steps, lost = 0;
    for (int64_t i : longs)
      if (i < consumed) ++lost, ++consumed;
    std::printf("%s: %zu long batch(es) in the first %lld; skip lost %lld, split split %lld\n", dev.str().c_str(),
                longs.size(), (long long)skip.steps + 8, (long long)lost,
                (long long)p["oom"]["split_batches"].get<int64_t>());
    EXPECT_EQ(s["steps"], skip.steps);
    EXPECT_EQ(s["oom"]["skipped_batches"], lost) << dev.str();
    EXPECT_EQ(s["oom"]["samples_lost"], lost * skip.batch);
    EXPECT_EQ(s["oom"]["split_batches"], 0);
    // split: the same batches run as micro-batches; nothing lost.
    int64_t in_window = 0;
    for (int64_t i : longs) in_window += i < split.steps;
    EXPECT_EQ(p["steps"], split.steps);
    EXPECT_EQ(p["oom"]["samples_lost"], 0);
    EXPECT_EQ(p["oom"]["skipped_batches"], 0);
    EXPECT_EQ(p["oom"]["split_batches"], in_window) << dev.str();
    for (const auto& e : p["history"]["oom_splits"]) EXPECT_GE(e["micro_batches"].get<int64_t>(), 2);
  }
}

TEST(OomRun, ImpossibleSplitIsRefusedBeforeAnyWork) {
  RunSpec c = long_seq_run("split", meta_device());
  c.device_memory = uint64_t(step_reserved_peak(c, 512, 1)) / 2;   // not even one long sequence fits
  try {
    train(c);
    FAIL() << "no error";
  } catch (const OutOfMemoryError& e) {
    FAIL() << "an OOM at run time instead of the pre-flight: " << e.what();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("--on-oom split cannot make this run fit: one sequence of 512 tokens"),
              std::string::npos) << e.what();
  }
}

}  // namespace
