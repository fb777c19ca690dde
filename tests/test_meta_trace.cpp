// test_meta_trace.cpp — the meta device's invariant: a training step on `meta` makes
// exactly the allocation trace (action, size, layer/phase frame) and peaks of the same
// step on `cpu`, for every model in the zoo (small inputs keep the cpu side fast):
//  * MetaTrace: image classifiers on cpu:0, SGD and Adam;
//  * MetaTraceOnCpu1: every zoo model on cpu:1 through the trainer's host batch path, the
//    host -> device copies and per-device code a CUDA device takes (a device-dependent
//    allocation order, as BERT's per-batch index tensors had, shows here without a GPU);
//    trace and every allocator stat equal meta's, as tests/test_cuda_models.cpp asks of cuda.
// ctest tier: models
// ctest slow: Zoo/MetaTrace.*/resnet5*:Zoo/MetaTraceOnCpu1.*/bert_base:Zoo/MetaTraceOnCpu1.*/vgg*
#include <gtest/gtest.h>

#include <algorithm>

#include "engine/memory/caching_allocator.h"
#include "engine/optim/optimizer.h"
#include "engine/train/train_step.h"
#include "models/model_zoo.h"
#include "zoo_step_util.h"

using namespace oomlab;

namespace {
struct Recorded {
  std::vector<TraceEvent> trace;
  std::map<std::string, int64_t> stats;
};

Recorded record_step(const std::string& name, Device dev, const std::string& optimizer) {
  reset_allocators();
  CachingAllocator& al = allocator_for(dev);
  al.record_history(true);
  ModelConfig cfg = default_model_config(name);
  cfg.device = dev;
  cfg.num_classes = 10;
  if (cfg.height > 64) { cfg.height = 32; cfg.width = 32; }   // vgg/resnet at 32x32
  nn::ModulePtr model = build_model(name, cfg);
  ParamGroup g;
  g.params = model->named_parameters();
  g.lr = 0.01;
  g.momentum = 0.9;
  auto opt = make_optimizer(optimizer, {g});
  const int64_t batch = 2;
  std::vector<float> images(size_t(batch * cfg.in_channels * cfg.height * cfg.width), 0.5f);
  std::vector<int64_t> labels = {1, 3};
  for (int step = 0; step < 2; ++step) {
    Tensor x = images_to_device(images.data(), {batch, cfg.in_channels, cfg.height, cfg.width}, dev);
    Tensor y = labels_to_device(labels.data(), batch, dev);
    train_step(*model, *opt, x, y);
  }
  Recorded r{al.trace(), al.stats()};
  al.record_history(false);
  return r;
}
}  // namespace

class MetaTrace : public ::testing::TestWithParam<std::string> {};

TEST_P(MetaTrace, TrainingStepTraceAndPeaksEqualCpu) {
  const std::string name = GetParam();
  for (const char* opt : {"sgd", "adam"}) {
    if (std::string(opt) == "adam" && name.rfind("vgg", 0) == 0) continue;   // keep cpu time low
    Recorded cpu = record_step(name, cpu_device(), opt);
    Recorded meta = record_step(name, meta_device(), opt);
    ASSERT_EQ(cpu.trace.size(), meta.trace.size()) << name << " " << opt;
    ASSERT_GT(cpu.trace.size(), 10u);
    for (size_t i = 0; i < cpu.trace.size(); ++i) {
      ASSERT_EQ(cpu.trace[i].action, meta.trace[i].action) << name << " event " << i;
      ASSERT_EQ(cpu.trace[i].size, meta.trace[i].size) << name << " event " << i;
      ASSERT_EQ(cpu.trace[i].frame, meta.trace[i].frame) << name << " event " << i;
    }
    EXPECT_EQ(cpu.stats, meta.stats) << name << " " << opt;
    EXPECT_GT(cpu.stats.at("allocated_bytes.all.peak"), 0);
  }
}

// Image classifiers only: the token (bert-*) and segmentation (unet*) models have their
// own meta == cpu trace test in tests/test_models_seq_seg.cpp (different inputs/losses).
std::vector<std::string> image_classifiers() {
  std::vector<std::string> out;
  for (const auto& n : model_names())
    if (model_input_kind(n) == InputKind::image && model_task_kind(n) == TaskKind::classification) out.push_back(n);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Zoo, MetaTrace, ::testing::ValuesIn(image_classifiers()),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');   // gtest names: [A-Za-z0-9_]
                           return s;
                         });

class MetaTraceOnCpu1 : public ::testing::TestWithParam<std::string> {};

TEST_P(MetaTraceOnCpu1, TrainerStepTraceAndStatsEqualMeta) {
  const std::string name = GetParam();
  oomlab::testing::Recorded meta = oomlab::testing::record_steps(name, meta_device(1));
  oomlab::testing::Recorded cpu1 = oomlab::testing::record_steps(name, cpu_device(1));
  reset_allocators();
  ASSERT_EQ(cpu1.stats.at("workspace_bytes.all.peak"), 0);   // no workspace on the CPU: exact equality
  oomlab::testing::expect_trace_equals_meta(name, meta, cpu1);
}

INSTANTIATE_TEST_SUITE_P(Zoo, MetaTraceOnCpu1, ::testing::ValuesIn(model_names()),
                         [](const auto& info) { return oomlab::testing::gtest_name(info.param); });
