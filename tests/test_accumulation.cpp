// test_accumulation.cpp — gradient accumulation (`--accumulate K`): without BatchNorm, K
// micro-batches of B give the update of one batch of K*B (float64 to 1e-12, float32 to
// 1e-6) for the MLP, a BN-free CNN and bert-mini with dropout off; with BatchNorm they do
// not (batch statistics of B samples, running statistics updated K times); the trainer
// keeps the sample order whatever K is; bad --accumulate values are clear errors.
// ctest tier: models
// ctest slow: Models/AccumulationWithoutBn.KMicroBatchesEqualOneBigBatch/bert_mini
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "engine/core/error.h"
#include "engine/nn/layers.h"
#include "engine/optim/optimizer.h"
#include "engine/train/accumulation.h"
#include "engine/train/train_step.h"
#include "experiments/train/train_command.h"
#include "models/model_zoo.h"
#include "tests/zoo_test_util.h"

using namespace oomlab;
using namespace oomlab::test;

namespace {
// A small CNN without normalisation: conv-relu-pool twice, then a classifier.
nn::ModulePtr bn_free_cnn(const ModelConfig& c) {
  nn::LayerOptions o;
  o.device = c.device;
  o.dtype = c.dtype;
  Generator g{c.seed, 0};
  o.generator = &g;
  std::vector<nn::ModulePtr> layers = {
      std::make_shared<nn::Conv2d>(c.in_channels, 8, 3, nn::Conv2dOptions{1, 1}, o), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2),
      std::make_shared<nn::Conv2d>(8, 16, 3, nn::Conv2dOptions{1, 1}, o), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(2), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(16 * (c.height / 4) * (c.width / 4), c.num_classes, true, o)};
  return std::make_shared<nn::Sequential>(layers);
}

nn::ModulePtr build(const std::string& name, const ModelConfig& c) {
  return name == "cnn" ? bn_free_cnn(c) : build_model(name, c);
}

ModelConfig config_for(const std::string& name, DType dtype) {
  ModelConfig c = small_config(name == "cnn" ? "resnet20" : name, cpu_device());
  c.dtype = dtype;
  c.dropout = 0.0;   // bert: dropout off (its masks depend on the micro-batch's shape)
  if (name == "cnn") c.height = c.width = 12, c.in_channels = 1;
  return c;
}

Tensor input_of(const std::string& name, const ModelConfig& c, int64_t batch) {
  Tensor x = make_input(name == "cnn" ? "resnet20" : name, c, batch);
  return dtype_is_floating(x.dtype()) && x.dtype() != c.dtype ? x.to(c.dtype) : x;
}

// Weights after two SGD-with-momentum steps on the same batch of `batch` samples, run as
// `k` micro-batches.
std::vector<double> weights_after(const std::string& name, DType dtype, int64_t batch, int64_t k) {
  const ModelConfig c = config_for(name, dtype);
  nn::ModulePtr m = build(name, c);
  ParamGroup g;
  g.params = m->named_parameters();
  g.lr = 0.05;
  g.momentum = 0.9;
  auto opt = make_optimizer("sgd", {g});
  GradientAccumulation acc(k);
  TrainStep step(*m, *opt, {&acc});
  const Tensor x = input_of(name, c, batch);
  const Tensor y = make_target(name == "cnn" ? "resnet20" : name, c, batch);
  for (int i = 0; i < 2; ++i) step.run(x, y, false);
  return flat_weights(*m);
}

}  // namespace

class AccumulationWithoutBn : public ::testing::TestWithParam<std::string> {};

TEST_P(AccumulationWithoutBn, KMicroBatchesEqualOneBigBatch) {
  const std::string name = GetParam();
  for (auto [dtype, tol] : {std::pair{DType::f64, 1e-12}, std::pair{DType::f32, 1e-6}}) {
    SCOPED_TRACE(name + " " + dtype_name(dtype));
    const std::vector<double> big = weights_after(name, dtype, 8, 1);
    for (int64_t k : {2, 4, 8}) {
      const std::vector<double> acc = weights_after(name, dtype, 8, k);
      ASSERT_EQ(acc.size(), big.size());
      EXPECT_LT(max_rel_diff(acc, big), tol) << "K = " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, AccumulationWithoutBn, ::testing::Values("mlp", "cnn", "bert-mini"),
                         [](const auto& info) {
                           return info.param == "bert-mini" ? std::string("bert_mini") : info.param;
                         });

// With BatchNorm the micro-batch's statistics differ from the big batch's: the updates
// differ, and the running statistics are updated once per micro-batch.
TEST(Accumulation, WithBatchNormItDiffersAndRunningStatsUpdatePerMicroBatch) {
  const std::vector<double> big = weights_after("resnet20", DType::f64, 8, 1);
  const std::vector<double> acc = weights_after("resnet20", DType::f64, 8, 4);
  EXPECT_GT(max_rel_diff(acc, big), 1e-6);
  const ModelConfig c = config_for("resnet20", DType::f32);
  nn::ModulePtr m = build_model("resnet20", c);
  ParamGroup g;
  g.params = m->named_parameters();
  auto opt = make_optimizer("sgd", {g});
  GradientAccumulation k4(4);
  TrainStep(*m, *opt, {&k4}).run(make_input("resnet20", c, 8), make_target("resnet20", c, 8), false);
  for (const auto& [n, b] : m->named_buffers())
    if (n == "bn1.num_batches_tracked") {
      EXPECT_EQ(b.to_vector_i64()[0], 4);
    }
  EXPECT_EQ(opt->step_count(), 1);
}

// Through the trainer: --accumulate 2 --batch 8 and --batch 16 see the same samples in the
// same order (one loader batch of 16 per step): for the MLP the losses agree to float32
// rounding; throughput counts samples.
TEST(Accumulation, TrainerKeepsTheSampleOrderAndCountsSamples) {
  RunSpec c;
  c.model = "mlp";
  c.dataset = "synthetic";
  c.input = {1, 28, 28};
  c.synthetic_size = 128;
  c.batch = 16;
  c.steps = 12;
  c.optimizer = "sgd";
  c.lr = 0.05;
  c.seed = 4;
  c.quiet = true;
  c.eval_batches = 1;
  const nlohmann::json big = train(c);
  c.batch = 8;
  c.accumulate = 2;
  const nlohmann::json acc = train(c);
  const auto& lb = big["metrics"]["history"]["train_loss"];
  const auto& la = acc["metrics"]["history"]["train_loss"];
  ASSERT_EQ(la.size(), 12u);
  for (size_t i = 0; i < la.size(); ++i)
    EXPECT_NEAR(la[i].get<double>(), lb[i].get<double>(), 1e-5 * std::abs(lb[i].get<double>())) << "step " << i + 1;
  EXPECT_EQ(acc["config"]["accumulate"], 2);
  const double med = acc["metrics"]["step_time_s"]["median"].get<double>();
  EXPECT_NEAR(acc["metrics"]["images_per_s"].get<double>(), 16.0 / med, 1e-6 * 16.0 / med);
}

// --workers N builds batches on N threads: the run is bit-identical for any N (same
// batches in the same order), 0 included (built in the loop).
TEST(Workers, RunIsTheSameForAnyNumberOfWorkers) {
  RunSpec c;
  c.model = "mlp";
  c.dataset = "synthetic";
  c.input = {1, 28, 28};
  c.synthetic_size = 256;
  c.batch = 16;
  c.steps = 20;   // crosses an epoch (16 batches)
  c.optimizer = "sgd";
  c.lr = 0.05;
  c.seed = 2;
  c.quiet = true;
  c.eval_batches = 2;
  c.workers = 0;
  const nlohmann::json ref = train(c)["metrics"]["history"];
  for (int w : {1, 4}) {
    c.workers = w;
    const nlohmann::json h = train(c)["metrics"]["history"];
    EXPECT_EQ(h["train_loss"], ref["train_loss"]) << w << " workers";
    EXPECT_EQ(h["epochs"], ref["epochs"]) << w << " workers";
  }
}

TEST(Accumulation, BadValuesAreClearErrors) {
  RunSpec c;
  c.model = "mlp";
  c.dataset = "synthetic";
  c.synthetic_size = 64;
  c.batch = 8;
  c.accumulate = 0;
  EXPECT_THROW(check_train_config(c), ValueError);
  c.accumulate = 9;   // 8 batches of 8 in an epoch
  try {
    check_train_config(c);
    FAIL() << "expected an error";
  } catch (const ValueError& e) {
    EXPECT_NE(
        std::string(e.what()).find(
            "accumulating 9 micro-batches of 8 needs 72 samples per step, more than the 8 batches of 8 in an epoch"),
        std::string::npos)
        << e.what();
  }
  c.accumulate = 8;
  EXPECT_NO_THROW(check_train_config(c));
}
