// test_memory_report.cpp — `oomlab summary`'s saved-for-backward accounting: one row per
// module call with that call's bytes, each saved storage counted once in the totals, for
// models whose modules run more than once per forward (ResNet blocks call their shared
// relu two or three times, UNet its pool at every level). The reference is measured
// independently here: saved-tensor hooks over a training forward, each storage once.
// ctest tier: models
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine/autograd/saved_tensor.h"
#include "engine/memory/caching_allocator.h"
#include "experiments/plan/memory_report.h"
#include "models/model_zoo.h"

using namespace oomlab;

namespace {
// Bytes first saved under each frame ("layer" of "layer/fwd"), each storage once,
// parameters excluded, for one training forward of `model` at `batch` on meta.
std::map<std::string, int64_t> saved_by_frame(const std::string& model, const Shape& input, int64_t batch) {
  reset_allocators();
  ModelConfig cfg = default_model_config(model);
  cfg.device = meta_device();
  cfg.in_channels = input[0]; cfg.height = input[1]; cfg.width = input[2];
  nn::ModulePtr m = build_model(model, cfg);
  std::set<const void*> params, seen;
  for (const auto& [n, t] : m->named_parameters()) params.insert(t.storage().get());
  std::map<std::string, int64_t> by_frame;
  SavedTensorHooks hooks;
  hooks.pack = [&](const Tensor& t) -> std::shared_ptr<void> {
    if (!params.count(t.storage().get()) && seen.insert(t.storage().get()).second) {
      std::string frame = MemoryContext::current();
      by_frame[frame.substr(0, frame.rfind('/'))] += int64_t(t.storage()->nbytes);
    }
    return std::make_shared<Tensor>(t);
  };
  hooks.unpack = [](const std::shared_ptr<void>& h) { return *static_cast<Tensor*>(h.get()); };
  SavedTensorHooksGuard guard(hooks);
  Tensor x = Tensor::empty(model_input_shape(model, cfg, batch), DType::f32, meta_device());
  Tensor y = (*m)(x);
  return by_frame;
}

void expect_saved_bytes_match(const std::string& model, const Shape& input, int64_t batch) {
  SCOPED_TRACE(model);
  RunSpec spec = RunSpec::for_model(model);
  spec.input = input;
  const ModelSummary s = summarize_model(spec, batch);
  const std::map<std::string, int64_t> truth = saved_by_frame(model, input, batch);
  int64_t truth_total = 0;
  for (const auto& [frame, bytes] : truth) truth_total += bytes;
  // Totals: every saved storage exactly once.
  EXPECT_EQ(s.saved_bytes + s.nonleaf_saved_bytes, truth_total);
  // Per module: its rows (one per call) add up to what it really saved.
  std::map<std::string, int64_t> rows_by_name;
  std::map<std::string, int> calls;
  for (const LayerRow& r : s.layers) {
    rows_by_name[r.name] += r.saved_bytes;
    calls[r.name] += 1;
  }
  int repeated = 0;
  for (const auto& [name, bytes] : rows_by_name) {
    const auto it = truth.find(name);
    EXPECT_EQ(bytes, it == truth.end() ? 0 : it->second) << name << " (" << calls[name] << " calls)";
    repeated += calls[name] > 1;
  }
  EXPECT_GT(repeated, 0) << "the model should call some module more than once";
}
}  // namespace

TEST(MemoryReport, SavedBytesPerCallEachStorageOnceResNet) {
  expect_saved_bytes_match("resnet18", {3, 64, 64}, 2);
  expect_saved_bytes_match("resnet50", {3, 64, 64}, 2);
  expect_saved_bytes_match("resnet20", {1, 28, 28}, 4);
}

TEST(MemoryReport, SavedBytesPerCallEachStorageOnceUNet) { expect_saved_bytes_match("unet-small", {3, 64, 64}, 2); }

// A relu called twice: each call's row holds what that call saved (its own output), not
// the module's whole total twice.
TEST(MemoryReport, RepeatedModuleGetsOneRowPerCallWithItsOwnBytes) {
  RunSpec spec = RunSpec::for_model("resnet18");
  spec.input = {3, 32, 32};
  const ModelSummary s = summarize_model(spec, 2);
  std::vector<const LayerRow*> relu;
  for (const LayerRow& r : s.layers)
    if (r.name == "layer1.0.relu") relu.push_back(&r);
  ASSERT_EQ(relu.size(), 2u);   // torchvision's BasicBlock calls its relu twice
  // In-place relu saves its output, which is its input's storage: 2 x 64 x 8 x 8 floats each.
  EXPECT_EQ(relu[0]->saved_bytes, 2 * 64 * 8 * 8 * 4);
  EXPECT_EQ(relu[1]->saved_bytes, 2 * 64 * 8 * 8 * 4);
}

// Every model's default input is the zoo's: tiny-ff is the AMP table's 1x28x28 net with
// 669,706 parameters (a list in memory_report.cpp once gave it ImageNet's 3x224x224 input
// and 1000 classes: 77.8M parameters), the CNNs keep theirs.
TEST(MemoryReport, DefaultInputsAreTheZoos) {
  EXPECT_EQ(default_input_for("tiny-ff"), (Shape{1, 28, 28}));
  EXPECT_EQ(default_input_for("resnet20"), (Shape{1, 28, 28}));
  EXPECT_EQ(default_input_for("vgg16"), (Shape{3, 224, 224}));
  EXPECT_EQ(default_input_for("unet-small"), (Shape{3, 64, 64}));
  RunSpec spec = RunSpec::for_model("tiny-ff");
  EXPECT_EQ(summarize_model(spec, 2).params, 669706);
}
