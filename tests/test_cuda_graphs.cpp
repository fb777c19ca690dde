// test_cuda_graphs.cpp — --cuda-graphs (engine/train/graphed_step.h) and DeviceGraph
// (engine/memory/device_graph.h):
//  * on any machine: DeviceGraph refuses the cpu; on meta a capture runs its work for the
//    allocations only, in a private pool released with the graph, and a failed capture
//    releases it too; a graphed training run on meta warms up 3 steps, captures the 4th
//    and replays the rest, with the eager run's allocated peak (plus the 1 MiB of the
//    optimizer's constants); the capture starts from an
//    emptied cache, so its pool replaces what warm-up cached; a step that draws
//    random numbers it cannot redraw is refused at capture (dropout redraws: the generator
//    advances as in the eager run); train accuracy is not counted; each replay runs the
//    optimizer's host side (its step count advances) and allocates nothing;
//  * `estimate --cuda-graphs` counts the capture's pool: no larger batch fits than eagerly;
//  * on a GPU (skipped without one): a captured kernel replays on new input; a capture
//    that syncs with the host fails with CUDA's error and leaves the device usable; a
//    graphed run's losses equal the eager run's (warm-up bit for bit, replays within
//    float32 rounding; both runs with deterministic cuDNN algorithms), with SGD at a constant lr, AdamW under a cosine
//    schedule, and VGG's dropout.
// ctest tier: cli gpu
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/device_graph.h"
#include "engine/nn/layers.h"
#include "engine/ops/elementwise.h"
#include "engine/optim/optimizer.h"
#include "engine/train/graphed_step.h"
#include "experiments/plan/largest_batch.h"
#include "experiments/plan/memory_report.h"
#include "experiments/plan/run_spec.h"
#include "experiments/train/train_command.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
const Device kMeta{DeviceType::meta, 0};

RunSpec image_run(Device device, const std::string& model = "resnet20") {
  RunSpec c;
  c.model = model;
  c.dataset = "synthetic";
  c.input = {3, 32, 32};
  c.synthetic_size = 64;
  c.batch = 8;
  c.steps = 7;
  c.optimizer = "sgd";
  c.schedule = "constant";
  c.lr = 0.05;
  c.seed = 5;
  c.quiet = true;
  c.eval_batches = 1;
  c.device = device;
  return c;
}
const nlohmann::json& stats_of(const nlohmann::json& res, const std::string& dev) {
  return res["memory"]["devices"][dev];
}

// Deterministic cuDNN algorithms for the scope (torch.backends.cudnn.deterministic): runs
// compared bit for bit must not take nondeterministic (atomic) convolution algorithms, or two
// eager runs already differ (they did on an H200, from ResNet-20's third step).
struct DeterministicCudnn {
  DeterministicCudnn() { set_backend_options(with_deterministic(true)); }
  ~DeterministicCudnn() { set_backend_options(with_deterministic(false)); }
  static BackendOptions with_deterministic(bool on) {
    BackendOptions o;
    o.cudnn_deterministic = on;
    return o;
  }
};

// `base` trained eagerly and with --cuda-graphs: the graphed run's losses equal the eager
// run's within float32 rounding (relative 1e-5); returns the graphed run's metrics.
nlohmann::json expect_graphed_losses_match(const RunSpec& base) {
  const DeterministicCudnn deterministic;
  const nlohmann::json eager = train(base)["metrics"];
  RunSpec c = base;
  c.cuda_graphs = true;
  nlohmann::json graphed = train(c)["metrics"];
  const auto& le = eager["history"]["train_loss"];
  const auto& lg = graphed["history"]["train_loss"];
  EXPECT_EQ(le.size(), lg.size());
  for (size_t i = 0; i < std::min(le.size(), lg.size()); ++i)
    EXPECT_NEAR(lg[i].get<double>(), le[i].get<double>(), 1e-5 * std::abs(le[i].get<double>()) + 1e-6) << i;
  return graphed;
}
}  // namespace

TEST(DeviceGraph, TheCpuHasNoGraphs) {
  try {
    DeviceGraph g(cpu_device());
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("graph capture needs a CUDA device"), std::string::npos) << e.what();
  }
}

TEST(DeviceGraph, MetaCapturesAllocationsIntoAPoolReleasedWithTheGraph) {
  reset_allocators();
  CachingAllocator& al = allocator_for(kMeta);
  Tensor kept;
  {
    DeviceGraph g(kMeta);
    EXPECT_THROW(g.replay(), ValueError);
    g.capture([&] {
      Tensor scratch = Tensor::empty({1 << 20}, DType::f32, kMeta);
      kept = Tensor::empty({1 << 20}, DType::f32, kMeta);
    });
    EXPECT_TRUE(g.captured());
    EXPECT_EQ(al.stat("num_graph_pools"), 1);
    EXPECT_EQ(al.stat("graph_pools_reserved_bytes"),
              (int64_t(20) << 20) + (int64_t(2) << 20));  // + the constants' block
    EXPECT_THROW(g.capture([] {}), ValueError);
    const int64_t allocs = al.stat("allocation.all.allocated");
    g.replay();   // a replay allocates nothing
    EXPECT_EQ(al.stat("allocation.all.allocated"), allocs);
  }
  EXPECT_EQ(al.stat("num_graph_pools"), 0);
  EXPECT_EQ(al.stat("graph_pools_reserved_bytes"), 0);
  EXPECT_TRUE(kept.defined());   // a static output outlives its graph
}

TEST(DeviceGraph, AFailedCaptureReleasesItsPool) {
  reset_allocators();
  CachingAllocator& al = allocator_for(kMeta);
  DeviceGraph g(kMeta);
  EXPECT_THROW(g.capture([&] {
    Tensor t = Tensor::empty({1000}, DType::f32, kMeta);
    throw ShapeError("planted");
  }), ShapeError);
  EXPECT_FALSE(g.captured());
  EXPECT_EQ(al.stat("num_graph_pools"), 0);
  EXPECT_THROW(g.replay(), ValueError);
}

TEST(GraphedTraining, MetaRunKeepsTheEagerPeakAndItsPoolReplacesTheCache) {
  const nlohmann::json eager = train(image_run(kMeta));
  RunSpec c = image_run(kMeta);
  c.cuda_graphs = true;
  const nlohmann::json graphed = train(c);
  const nlohmann::json& g = graphed["metrics"]["cuda_graphs"];
  EXPECT_EQ(g["warmup_steps"], 3);
  EXPECT_EQ(g["captured_at_step"], 4);
  EXPECT_EQ(g["replays"], 4);
  EXPECT_EQ(graphed["config"]["cuda_graphs"], true);
  const nlohmann::json &se = stats_of(eager, "meta:0"), &sg = stats_of(graphed, "meta:0");
  // The eager peak plus the block of the optimizer's constants (device_graph.h).
  EXPECT_EQ(sg["allocated_bytes.all.peak"].get<int64_t>(),
            se["allocated_bytes.all.peak"].get<int64_t>() + int64_t(DeviceGraph::kConstBytes));
  EXPECT_GT(g["graph_pool_reserved_bytes"].get<int64_t>(), 0);
  // The capture starts from an emptied cache (torch.cuda.graph's empty_cache): the pool takes
  // the place of what warm-up had cached instead of adding to it.
  const int64_t pool = g["graph_pool_reserved_bytes"].get<int64_t>();
  EXPECT_LT(sg["reserved_bytes.all.peak"].get<int64_t>(), se["reserved_bytes.all.peak"].get<int64_t>() + pool);
  EXPECT_GT(sg["reserved_bytes.all.peak"].get<int64_t>(), pool);
  EXPECT_EQ(sg["num_graph_pools"], 1);
  EXPECT_TRUE(graphed["metrics"]["history"]["epochs"][0]["train_accuracy"].is_null());
}

// A replay runs the optimizer's host side (step counts advance as in eager training) and
// allocates nothing; the batch must keep the captured shape.
TEST(GraphedTraining, ReplaysRunTheOptimizersHostSideAndAllocateNothing) {
  reset_allocators();
  nn::LayerOptions o;
  o.device = kMeta;
  nn::Sequential model({std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(12, 3, true, o)});
  ParamGroup g;
  g.params = model.named_parameters();
  auto opt = make_optimizer("adamw", {g});
  TrainStep step(model, *opt);
  GraphedStep graphed(step, kMeta);
  HostBatch b;
  b.n = 4;
  b.shape = {4, 3, 2, 2};
  b.target_shape = {4};
  b.images.assign(48, 0.5f);
  b.labels.assign(4, 1);
  CachingAllocator& al = allocator_for(kMeta);
  for (int i = 1; i <= 7; ++i) {
    const int64_t allocs = al.stat("allocation.all.allocated");
    const StepOutput out = graphed.run(b);
    EXPECT_FALSE(out.correct_counted);
    EXPECT_EQ(opt->step_count(), i);
    if (i > 4) {
      EXPECT_EQ(al.stat("allocation.all.allocated"), allocs) << "replay " << i;
    }
  }
  EXPECT_EQ(graphed.metrics()["replays"], 4);
  b.shape = {4, 12, 1, 1};
  b.images.assign(48, 0.5f);
  EXPECT_THROW(graphed.run(b), ValueError);   // another shape than the captured one
}

// Dropout under graphs draws what the eager run draws: the device generator ends where the
// eager run's ends (and on a GPU the losses match: CudaGraphs below).
TEST(GraphedTraining, DropoutAdvancesTheGeneratorAsTheEagerRunDoes) {
  auto run = [](bool graphs) {
    reset_allocators();
    manual_seed(11);
    nn::LayerOptions o;
    o.device = kMeta;
    nn::Sequential model({std::make_shared<nn::Flatten>(), std::make_shared<nn::Dropout>(0.3),
                          std::make_shared<nn::Linear>(12, 3, true, o)});
    ParamGroup g;
    g.params = model.named_parameters();
    auto opt = make_optimizer("sgd", {g});
    TrainStep step(model, *opt);
    std::unique_ptr<GraphedStep> graphed = graphs ? std::make_unique<GraphedStep>(step, kMeta) : nullptr;
    HostBatch b;
    b.n = 4;
    b.shape = {4, 3, 2, 2};
    b.target_shape = {4};
    b.images.assign(48, 0.5f);
    b.labels.assign(4, 1);
    const Tensor x = Tensor::empty(b.shape, DType::f32, kMeta), y = Tensor::empty({4}, DType::i64, kMeta);
    for (int i = 0; i < 7; ++i) graphs ? (void)graphed->run(b) : (void)step.run(x, y, false);
    return device_generator(kMeta).get_state().offset;
  };
  const uint64_t eager = run(false);
  EXPECT_GT(eager, 0u);
  EXPECT_EQ(run(true), eager);
}

// Gradient accumulation is captured whole (the micro-batches' loss summed on the device):
// the step's loss is the eager run's (meta: no values; the warm-up, capture and replays run).
TEST(GraphedTraining, AccumulationIsCapturedWhole) {
  RunSpec c = image_run(kMeta);
  c.accumulate = 2;
  c.cuda_graphs = true;
  EXPECT_NO_THROW(check_train_config(c));
  const nlohmann::json res = train(c);
  EXPECT_EQ(res["metrics"]["cuda_graphs"]["replays"], 4);
}

// BERT's step is capturable (positions and padding mask made on the device: token_inputs),
// dropout included: on meta it warms up, captures and replays like the CNNs.
TEST(GraphedTraining, BertTrainsGraphedWithFixedLengthBatches) {
  RunSpec c = image_run(kMeta, "bert-tiny");
  c.dataset = "synthetic-seq";
  c.input = {};
  c.seq_min_len = c.seq_len;
  c.optimizer = "adamw";
  c.schedule = "warmup-cosine";
  c.cuda_graphs = true;
  const nlohmann::json res = train(c);
  EXPECT_EQ(res["metrics"]["cuda_graphs"]["replays"], 4);
}

// An op that cannot redraw its numbers on replay (fused attention's dropout) fails the
// capture, naming itself; the pool is released and eager draws work again afterwards.
TEST(DeviceGraph, ADrawThatCannotBeReplayedFailsTheCapture) {
  reset_allocators();
  DeviceGraph g(kMeta);
  try {
    g.capture([] { reserve_draws(nullptr, kMeta, 64, "fused attention's dropout"); });
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("fused attention's dropout draws random numbers"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(allocator_for(kMeta).stat("num_graph_pools"), 0);
  EXPECT_NO_THROW(reserve_draws(nullptr, kMeta, 64, "eager"));
  DeviceGraph ok(kMeta);
  EXPECT_NO_THROW(ok.capture([] { reserve_draws(nullptr, kMeta, 64, "dropout", /*graph_safe=*/true); }));
}

TEST(GraphedTraining, TheCliRefusesWhatAReplayWouldFreeze) {
  auto refused = [](RunSpec c, const std::string& words) {
    c.cuda_graphs = true;
    try {
      check_train_config(c);
      ADD_FAILURE() << "accepted; expected: " << words;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused(image_run(cpu_device()), "--cuda-graphs needs --device cuda");
  RunSpec scaled = image_run(kMeta);
  scaled.amp = DType::f16;
  scaled.loss_scale = parse_loss_scale("dynamic", true);
  refused(scaled, "without loss scaling");
  RunSpec tokens = image_run(kMeta, "bert-tiny");
  tokens.dataset = "synthetic-seq";
  tokens.input = {};
  refused(tokens, "give --seq-min-len 32");   // lengths vary from batch to batch
  tokens.seq_min_len = tokens.seq_len;
  EXPECT_NO_THROW(check_train_config([&] { RunSpec t = tokens; t.cuda_graphs = true; return t; }()));
}

// `estimate --cuda-graphs`: the capture after the eager steps, on meta: its pool and its
// reserved peak count, so no larger batch fits a card than eagerly.
TEST(GraphedEstimate, CountsThePoolAndFitsNoLargerBatch) {
  RunSpec s = RunSpec::for_model("resnet20");
  s.input = {3, 32, 32};
  const MemoryEstimate eager = estimate_memory(s, 64, "sgd");
  RunSpec sg = s;
  sg.cuda_graphs = true;
  const MemoryEstimate g = estimate_memory(sg, 64, "sgd");
  EXPECT_EQ(eager.graph_pool_bytes, -1);
  EXPECT_FALSE(eager.to_json().contains("cuda_graphs"));
  EXPECT_GT(g.graph_pool_bytes, 0);
  EXPECT_EQ(g.to_json()["cuda_graphs"]["pool_bytes"], g.graph_pool_bytes);
  EXPECT_EQ(g.peak_allocated_bytes, eager.peak_allocated_bytes);   // the eager steps are the same
  EXPECT_LE(g.graph_capture_peak_bytes, eager.peak_allocated_bytes + int64_t(DeviceGraph::kConstBytes));
  EXPECT_GT(g.graph_reserved_peak_bytes, g.graph_pool_bytes);
  const uint64_t card = uint64_t(g.graph_reserved_peak_bytes) - 1;   // the graphed step at 64 just misses it
  EXPECT_GE(largest_batch_under(s, "sgd", card).batch, 64);
  EXPECT_LT(largest_batch_under(sg, "sgd", card).batch, 64);
}

TEST(GraphedEstimate, TheModelRulesAreTrainsToo) {
  auto graphed = [](const std::string& model, LossScaleSpec::Kind scale) {
    RunSpec s = RunSpec::for_model(model);
    s.cuda_graphs = true;
    s.loss_scale.kind = scale;
    return s;
  };
  EXPECT_NO_THROW(check_run_model_techniques(graphed("resnet50", LossScaleSpec::Kind::none)));
  EXPECT_NO_THROW(check_run_model_techniques(graphed("bert-base", LossScaleSpec::Kind::none)));
  EXPECT_THROW(check_run_model_techniques(graphed("resnet50", LossScaleSpec::Kind::dynamic)), ValueError);
}

TEST(CudaGraphs, ACapturedKernelReplaysOnNewInput) {
  OOMLAB_REQUIRE_CUDA();
  Tensor x = to_device(Tensor::from_vector({1, 2, 3, 4}, {4}), cuda0());
  Tensor y;
  DeviceGraph g(cuda0());
  g.capture([&] { y = scale(x, 3.0); });
  g.replay();
  EXPECT_EQ(values(y), (std::vector<double>{3, 6, 9, 12}));
  x.copy_(Tensor::from_vector({-1, 0, 0.5, 10}, {4}));
  g.replay();
  EXPECT_EQ(values(y), (std::vector<double>{-3, 0, 1.5, 30}));
}

TEST(CudaGraphs, ACaptureThatSyncsWithTheHostFailsAndLeavesTheDeviceUsable) {
  OOMLAB_REQUIRE_CUDA();
  Tensor x = to_device(Tensor::from_vector({1, 2}, {2}), cuda0());
  DeviceGraph g(cuda0());
  EXPECT_ANY_THROW(g.capture([&] { (void)scale(x, 2.0).item(); }));
  EXPECT_FALSE(g.captured());
  EXPECT_EQ(allocator_for(cuda0()).stat("num_graph_pools"), 0);
  EXPECT_EQ(values(scale(x, 2.0)), (std::vector<double>{2, 4}));
}

// SGD at a constant lr, then AdamW under a warm-up + cosine schedule (each replay with its
// step's lr and bias corrections: graph_consts.h).
class CudaGraphsRecipe : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Recipes, CudaGraphsRecipe, ::testing::Values("sgd/constant", "adamw/warmup-cosine"));

TEST_P(CudaGraphsRecipe, AGraphedRunsLossesEqualTheEagerRuns) {
  OOMLAB_REQUIRE_CUDA();
  const std::string recipe = GetParam();
  RunSpec base = image_run(cuda0());
  base.optimizer = recipe.substr(0, recipe.find('/'));
  base.schedule = recipe.substr(recipe.find('/') + 1);
  if (base.optimizer == "adamw") base.lr = 1e-3;
  const DeterministicCudnn deterministic;
  const nlohmann::json eager = train(base)["metrics"];
  RunSpec c = base;
  c.cuda_graphs = true;
  const nlohmann::json graphed = train(c)["metrics"];
  EXPECT_EQ(graphed["cuda_graphs"]["replays"], 4);
  const auto& le = eager["history"]["train_loss"];
  const auto& lg = graphed["history"]["train_loss"];
  ASSERT_EQ(le.size(), lg.size());
  for (size_t i = 0; i < le.size(); ++i) {
    SCOPED_TRACE(i);
    if (i < 3) EXPECT_EQ(lg[i], le[i]);
    else EXPECT_NEAR(lg[i].get<double>(), le[i].get<double>(), 1e-5 * std::abs(le[i].get<double>()) + 1e-6);
  }
}

// VGG's classifier dropout under graphs: every replay draws fresh masks, the eager run's.
TEST(CudaGraphs, DropoutReplaysMatchTheEagerRun) {
  OOMLAB_REQUIRE_CUDA();
  RunSpec base = image_run(cuda0(), "vgg11");
  base.steps = 6;
  expect_graphed_losses_match(base);
}

// BERT (token_inputs on the device, dropout redrawn per replay) under graphs: the eager
// run's losses.
TEST(CudaGraphs, BertReplaysMatchTheEagerRun) {
  OOMLAB_REQUIRE_CUDA();
  RunSpec base = image_run(cuda0(), "bert-tiny");
  base.dataset = "synthetic-seq";
  base.input = {};
  base.seq_min_len = base.seq_len;
  base.optimizer = "adamw";
  base.lr = 1e-3;
  expect_graphed_losses_match(base);
}

// Accumulation under graphs: the loss is summed on the device; the eager run's losses
// within float32 rounding (the reported loss also within an ulp of the host's division).
TEST(CudaGraphs, AccumulatedReplaysMatchTheEagerRun) {
  OOMLAB_REQUIRE_CUDA();
  RunSpec base = image_run(cuda0());
  base.accumulate = 2;
  base.batch = 4;
  expect_graphed_losses_match(base);
}
