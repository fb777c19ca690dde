// test_cuda_graphs.cpp — --cuda-graphs (engine/train/graphed_step.h) and DeviceGraph
// (engine/memory/device_graph.h):
//  * on any machine: DeviceGraph refuses the cpu; on meta a capture runs its work for the
//    allocations only, in a private pool released with the graph, and a failed capture
//    releases it too; a graphed training run on meta warms up 3 steps, captures the 4th
//    and replays the rest, with the eager run's allocated peak; the capture starts from an
//    emptied cache, so its pool replaces what warm-up cached; a step that draws
//    random numbers (dropout) is refused at capture; train accuracy is not counted;
//  * on a GPU (skipped without one): a captured kernel replays on new input; a capture
//    that syncs with the host fails with CUDA's error and leaves the device usable; a
//    graphed run's losses equal the eager run's (warm-up bit for bit, replays within
//    float32 rounding).
// ctest tier: cli gpu
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/device_graph.h"
#include "engine/ops/elementwise.h"
#include "experiments/cli/train_command.h"

using namespace oomlab;
using namespace oomlab::testing;

namespace {
const Device kMeta{DeviceType::meta, 0};

TrainConfig image_run(Device device, const std::string& model = "resnet20") {
  TrainConfig c;
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
const nlohmann::json& stats_of(const nlohmann::json& res, const std::string& dev) { return res["memory"]["devices"][dev]; }
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
    EXPECT_EQ(al.stat("graph_pools_reserved_bytes"), int64_t(20) << 20);
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
  TrainConfig c = image_run(kMeta);
  c.cuda_graphs = true;
  const nlohmann::json graphed = train(c);
  const nlohmann::json& g = graphed["metrics"]["cuda_graphs"];
  EXPECT_EQ(g["warmup_steps"], 3);
  EXPECT_EQ(g["captured_at_step"], 4);
  EXPECT_EQ(g["replays"], 4);
  EXPECT_EQ(graphed["config"]["cuda_graphs"], true);
  const nlohmann::json &se = stats_of(eager, "meta:0"), &sg = stats_of(graphed, "meta:0");
  EXPECT_EQ(sg["allocated_bytes.all.peak"], se["allocated_bytes.all.peak"]);
  EXPECT_GT(g["graph_pool_reserved_bytes"].get<int64_t>(), 0);
  // The capture starts from an emptied cache (torch.cuda.graph's empty_cache): the pool takes
  // the place of what warm-up had cached instead of adding to it.
  const int64_t pool = g["graph_pool_reserved_bytes"].get<int64_t>();
  EXPECT_LT(sg["reserved_bytes.all.peak"].get<int64_t>(), se["reserved_bytes.all.peak"].get<int64_t>() + pool);
  EXPECT_GT(sg["reserved_bytes.all.peak"].get<int64_t>(), pool);
  EXPECT_EQ(sg["num_graph_pools"], 1);
  EXPECT_TRUE(graphed["metrics"]["history"]["epochs"][0]["train_accuracy"].is_null());
}

TEST(GraphedTraining, AStepThatDrawsRandomNumbersIsRefusedAtCapture) {
  TrainConfig c = image_run(kMeta, "vgg11");
  c.cuda_graphs = true;
  try {
    train(c);
    FAIL() << "expected a ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("draws random numbers"), std::string::npos) << e.what();
  }
}

TEST(GraphedTraining, TheCliRefusesWhatAReplayWouldFreeze) {
  auto refused = [](TrainConfig c, const std::string& words) {
    c.cuda_graphs = true;
    try {
      check_train_config(c);
      ADD_FAILURE() << "accepted; expected: " << words;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused(image_run(cpu_device()), "--cuda-graphs needs --device cuda");
  TrainConfig adam = image_run(kMeta);
  adam.optimizer = "adam";
  refused(adam, "--cuda-graphs needs --optimizer sgd");
  TrainConfig cosine = image_run(kMeta);
  cosine.schedule = "cosine";
  refused(cosine, "--cuda-graphs needs --schedule constant");
  TrainConfig scaled = image_run(kMeta);
  scaled.amp = "fp16";
  scaled.loss_scale = "dynamic";
  refused(scaled, "without loss scaling");
  TrainConfig tokens = image_run(kMeta, "bert-tiny");
  tokens.dataset = "synthetic-seq";
  tokens.input = {};
  refused(tokens, "replays one batch shape");
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

TEST(CudaGraphs, AGraphedRunsLossesEqualTheEagerRuns) {
  OOMLAB_REQUIRE_CUDA();
  const nlohmann::json eager = train(image_run(cuda0()))["metrics"];
  TrainConfig c = image_run(cuda0());
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
