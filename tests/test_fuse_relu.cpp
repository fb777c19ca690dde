// test_fuse_relu.cpp — --fuse-relu (ModelConfig::fuse_relu; models/resnet.cpp
// norm_relu, nn::BatchNorm2d::fused_relu, batch_norm_relu; models/vgg.cpp, nn::Conv2d::
// fused_relu, conv2d_relu): on the CPU a ResNet's and a VGG's training steps (SGD with
// momentum, two steps) leave every parameter, buffer and the losses bit-identical to the
// unfused model, with training and eval forwards equal too; on the meta device the fused
// ResNet allocates fewer blocks and never more peak memory, the fused VGG exactly as the
// unfused one; the CLI refuses the flag for a model without the pairs it knows.
// ctest tier: models
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "experiments/plan/model_arch.h"
#include "tests/zoo_step_util.h"
#include "tests/op_test_util.h"

namespace oomlab::testing {
namespace {

struct Trained { std::vector<double> losses; std::vector<std::vector<uint8_t>> state; std::vector<uint8_t> eval_out; };

Trained train(const std::string& name, bool fused) {
  ZooSetup s = zoo_setup(name, cpu_device());
  s.cfg.fuse_relu = fused;
  nn::ModulePtr m = build_model(name, s.cfg);
  auto opt = sgd_for(*m);
  Trained r;
  for (int step = 0; step < 2; ++step) {
    HostBatch b = make_batch(name, s.cfg, s.batch, 20 + step);
    manual_seed(3);
    r.losses.push_back(train_step(*m, *opt, batch_input_to_device(b, cpu_device()),
                                  batch_target_to_device(b, cpu_device())).loss.item());
  }
  for (auto& [n, p] : m->named_parameters()) r.state.push_back(tensor_bytes(p));
  for (auto& [n, b] : m->named_buffers()) r.state.push_back(tensor_bytes(b));
  m->eval();
  NoGradGuard no_grad;
  HostBatch b = make_batch(name, s.cfg, s.batch, 30);
  r.eval_out = tensor_bytes((*m)(batch_input_to_device(b, cpu_device())));
  return r;
}

// One test a model (ctest runs them side by side)
class FuseReluSteps : public ::testing::TestWithParam<const char*> {};

TEST_P(FuseReluSteps, AreBitIdenticalOnTheCpu) {
  const Trained fused = train(GetParam(), true), eager = train(GetParam(), false);
  EXPECT_EQ(fused.losses, eager.losses);
  ASSERT_EQ(fused.state.size(), eager.state.size());
  for (size_t i = 0; i < fused.state.size(); ++i) EXPECT_EQ(fused.state[i], eager.state[i]) << "tensor " << i;
  EXPECT_EQ(fused.eval_out, eager.eval_out);
}

INSTANTIATE_TEST_SUITE_P(ResNetsAndVggs, FuseReluSteps, ::testing::Values("resnet20", "resnet50", "vgg11", "vgg11_bn"),
                         [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); });

std::map<std::string, int64_t> meta_step_stats(const std::string& name, bool fused) {
  reset_allocators();
  ZooSetup s = zoo_setup(name, meta_device());
  s.cfg.fuse_relu = fused;
  {
    nn::ModulePtr m = build_model(name, s.cfg);
    auto opt = sgd_for(*m);
    HostBatch b = make_batch(name, s.cfg, s.batch, 40);
    train_step(*m, *opt, batch_input_to_device(b, meta_device()), batch_target_to_device(b, meta_device()));
  }
  return allocator_for(meta_device()).stats();
}

TEST(FuseRelu, FewerAllocationsAndNoHigherPeakOnMeta) {
  for (const char* name : {"resnet18", "resnet50"}) {
    SCOPED_TRACE(name);
    const auto fused = meta_step_stats(name, true), eager = meta_step_stats(name, false);
    EXPECT_LT(fused.at("allocation.all.allocated"), eager.at("allocation.all.allocated"));
    EXPECT_LE(fused.at("allocated_bytes.all.peak"), eager.at("allocated_bytes.all.peak"));
  }
}

// VGG's fused convs allocate exactly what the unfused conv + relu_ pairs do (conv2d_relu
// records relu_'s node and saved result on the conv's output): the same stats on meta;
// vgg11_bn's BatchNorm + ReLU pairs save their backward's relu gradient, as the ResNets'.
TEST(FuseRelu, VggAllocatesAsUnfusedOnMeta) {
  EXPECT_EQ(meta_step_stats("vgg11", true), meta_step_stats("vgg11", false));
  const auto fused = meta_step_stats("vgg11_bn", true), eager = meta_step_stats("vgg11_bn", false);
  EXPECT_LT(fused.at("allocation.all.allocated"), eager.at("allocation.all.allocated"));
  EXPECT_LE(fused.at("allocated_bytes.all.peak"), eager.at("allocated_bytes.all.peak"));
}

TEST(FuseRelu, OnlyTheResNetsAndVggsTakeTheFlag) {
  ArchOverrides o;
  o.fuse_relu = "on";
  EXPECT_NO_THROW(o.check_fits("resnet50"));
  EXPECT_NO_THROW(o.check_fits("resnet20"));
  EXPECT_NO_THROW(o.check_fits("vgg16"));
  EXPECT_NO_THROW(o.check_fits("vgg11_bn"));
  try {
    o.check_fits("bert-base");
    ADD_FAILURE() << "bert-base accepted --fuse-relu on";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("--fuse-relu applies to the ResNets"), std::string::npos) << e.what();
  }
  o.fuse_relu = "off";   // given, whatever its value: refused where it does not apply (never ignored)
  EXPECT_THROW(o.check_fits("bert-base"), ValueError);
  EXPECT_NO_THROW(o.check_fits("resnet50"));
  ModelConfig cfg;
  o.apply(cfg);
  EXPECT_FALSE(cfg.fuse_relu);
  EXPECT_FALSE(o.to_json("resnet50").contains("fuse_relu"));
  o.fuse_relu = "on";
  o.apply(cfg);
  EXPECT_TRUE(cfg.fuse_relu);
  EXPECT_EQ(o.to_json("resnet50")["fuse_relu"], true);
}

}  // namespace
}  // namespace oomlab::testing
