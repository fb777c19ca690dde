// test_models.cpp — nn::Module tree semantics and the model zoo: torchvision parameter
// counts and key names (built on meta: no memory, no init), forward shapes on meta for
// every model, small cpu forward+backward (resnet20, mlp), init reproducibility,
// train/eval propagation, BN buffers, MemoryContext labels, clear errors.
// ctest tier: models
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/forward_observer.h"
#include "engine/nn/layers.h"
#include "engine/ops/loss.h"
#include "models/model_zoo.h"

using namespace oomlab;

namespace {
ModelConfig meta_config(const std::string& name, int64_t classes) {
  ModelConfig cfg = default_model_config(name);
  cfg.num_classes = classes;
  cfg.device = meta_device();
  return cfg;
}
std::vector<std::string> keys(const nn::NamedTensors& v) {
  std::vector<std::string> k;
  for (auto& [n, t] : v) k.push_back(n);
  return k;
}
bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}
}  // namespace

TEST(ModelZoo, TorchvisionParameterCounts) {
  const std::pair<const char*, int64_t> expected[] = {
      {"vgg11", 132863336},    {"vgg11_bn", 132868840}, {"vgg16", 138357544}, {"vgg16_bn", 138365992},
      {"resnet18", 11689512},  {"resnet34", 21797672},  {"resnet50", 25557032},
  };
  for (auto& [name, count] : expected) {
    auto m = build_model(name, meta_config(name, 1000));
    EXPECT_EQ(m->num_parameters(), count) << name;
  }
}

TEST(ModelZoo, SmallModelParameterCounts) {
  // Option-B CIFAR ResNets (see models/resnet.h) and the MLP, 10 classes.
  EXPECT_EQ(build_model("resnet20", meta_config("resnet20", 10))->num_parameters(), 272186);
  EXPECT_EQ(build_model("resnet56", meta_config("resnet56", 10))->num_parameters(), 855482);
  ModelConfig c3 = meta_config("resnet20", 10);
  c3.in_channels = 3; c3.height = c3.width = 32;
  EXPECT_EQ(build_model("resnet20", c3)->num_parameters(), 272474);
  EXPECT_EQ(build_model("resnet56", c3)->num_parameters(), 855770);
  EXPECT_EQ(build_model("mlp", meta_config("mlp", 10))->num_parameters(), 235146);
}

// --norm: torchvision's norm_layer for the ResNets. GroupNorm (gcd(32, C) groups) keeps
// BN's weight and bias (same parameter count, no running buffers); none drops them (2 per
// normalised channel: 784 channels in resnet20); other models refuse it.
TEST(ModelZoo, ResNetNormLayerChoice) {
  ModelConfig c = meta_config("resnet20", 10);
  c.norm = nn::NormKind::group;
  nn::ModulePtr gn = build_model("resnet20", c);
  EXPECT_EQ(gn->num_parameters(), 272186);
  EXPECT_TRUE(gn->named_buffers().empty());
  EXPECT_EQ(dynamic_cast<nn::GroupNorm*>(gn->submodule("bn1"))->num_groups, 16);
  EXPECT_EQ(dynamic_cast<nn::GroupNorm*>(gn->submodule("layer3.0.bn2"))->num_groups, 32);
  EXPECT_NE(dynamic_cast<nn::GroupNorm*>(gn->submodule("layer2.0.downsample.1")), nullptr);
  c.norm = nn::NormKind::none;
  nn::ModulePtr none = build_model("resnet20", c);
  EXPECT_EQ(none->num_parameters(), 272186 - 2 * 784);
  EXPECT_FALSE(contains(keys(none->state_dict()), "bn1.weight"));
  ModelConfig r50 = meta_config("resnet50", 1000);
  r50.norm = nn::NormKind::group;
  EXPECT_EQ(build_model("resnet50", r50)->num_parameters(), 25557032);
  ModelConfig v = meta_config("vgg11_bn", 10);
  v.norm = nn::NormKind::group;
  EXPECT_THROW(build_model("vgg11_bn", v), ValueError);
}

TEST(ModelZoo, ResNet18KeysMatchTorchvision) {
  auto m = build_model("resnet18", meta_config("resnet18", 1000));
  auto p = keys(m->named_parameters());
  ASSERT_GE(p.size(), 3u);
  EXPECT_EQ(p[0], "conv1.weight");
  EXPECT_EQ(p[1], "bn1.weight");
  EXPECT_EQ(p[2], "bn1.bias");
  EXPECT_EQ(p[3], "layer1.0.conv1.weight");
  EXPECT_TRUE(contains(p, "layer2.0.downsample.0.weight"));
  EXPECT_TRUE(contains(p, "layer2.0.downsample.1.bias"));
  EXPECT_FALSE(contains(p, "layer1.0.downsample.0.weight"));
  EXPECT_EQ(p.back(), "fc.bias");
  EXPECT_EQ(p.size(), 62u);   // torchvision resnet18: 62 parameter tensors
  auto b = keys(m->named_buffers());
  EXPECT_TRUE(contains(b, "layer4.1.bn2.running_var"));
  EXPECT_TRUE(contains(b, "bn1.num_batches_tracked"));
  EXPECT_EQ(b.size(), 60u);   // 20 BNs x 3 buffers
  EXPECT_EQ(m->state_dict().size(), 122u);
  for (auto& [n, t] : m->named_parameters()) {
    EXPECT_EQ(t.name(), n);
    EXPECT_TRUE(t.requires_grad()) << n;
  }
  for (auto& [n, t] : m->named_buffers()) EXPECT_FALSE(t.requires_grad()) << n;
  Tensor nbt = m->state_dict()[5].second;   // bn1: weight, bias, running_mean, running_var, nbt
  EXPECT_EQ(m->state_dict()[5].first, "bn1.num_batches_tracked");
  EXPECT_EQ(nbt.dtype(), DType::i64);
  EXPECT_EQ(nbt.dim(), 0);
  EXPECT_EQ(m->submodule("layer3.1.conv2")->full_name(), "layer3.1.conv2");
  EXPECT_STREQ(m->submodule("layer3.1")->type_name(), "BasicBlock");
  EXPECT_THROW(m->submodule("layer9"), ValueError);
}

TEST(ModelZoo, VggAndResNet50KeysMatchTorchvision) {
  auto v = build_model("vgg16_bn", meta_config("vgg16_bn", 1000));
  auto k = keys(v->state_dict());
  EXPECT_EQ(k[0], "features.0.weight");
  EXPECT_EQ(k[2], "features.1.weight");
  EXPECT_EQ(k[4], "features.1.running_mean");
  EXPECT_TRUE(contains(k, "features.41.running_var"));   // last BN of cfg D
  EXPECT_TRUE(contains(k, "classifier.0.weight"));
  EXPECT_TRUE(contains(k, "classifier.3.weight"));
  EXPECT_EQ(k.back(), "classifier.6.bias");
  auto v11 = keys(build_model("vgg11", meta_config("vgg11", 1000))->named_parameters());
  EXPECT_TRUE(contains(v11, "features.18.weight"));    // last conv of cfg A
  auto r = keys(build_model("resnet50", meta_config("resnet50", 1000))->named_parameters());
  EXPECT_TRUE(contains(r, "layer1.0.conv3.weight"));
  EXPECT_TRUE(contains(r, "layer1.0.downsample.0.weight"));   // 64 -> 256 projection
  EXPECT_TRUE(contains(r, "layer4.2.bn3.bias"));
  EXPECT_EQ(r.size(), 161u);
}

TEST(ModelZoo, ForwardShapesOnMetaForEveryModel) {
  for (const std::string& name : model_names()) {
    // Token and segmentation models have their own shape tests (test_models_seq_seg).
    if (model_input_kind(name) != InputKind::image ||
        model_task_kind(name) != TaskKind::classification) continue;
    ModelConfig cfg = meta_config(name, 7);
    auto m = build_model(name, cfg);
    int64_t s = default_image_size(name);
    Tensor x = Tensor::empty({2, default_in_channels(name), s, s}, DType::f32, meta_device());
    Tensor y = (*m)(x);
    EXPECT_EQ(y.shape(), (Shape{2, 7})) << name;
    EXPECT_TRUE(y.device().is_meta()) << name;
  }
}

TEST(ModelZoo, BackwardOnMetaReachesEveryParameter) {
  auto m = build_model("resnet18", meta_config("resnet18", 10));
  Tensor x = Tensor::empty({2, 3, 64, 64}, DType::f32, meta_device());
  Tensor t = Tensor::from_vector_i64({1, 2}, {2}, meta_device());
  cross_entropy((*m)(x), t).backward();
  for (auto& [n, p] : m->named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << n;
    EXPECT_EQ(p.grad().shape(), p.shape()) << n;
  }
}

TEST(ModelZoo, SmallImagesGiveClearShapeError) {
  ModelConfig cfg = meta_config("vgg16", 10);
  cfg.in_channels = 1; cfg.height = cfg.width = 28;
  try {
    build_model("vgg16", cfg);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("vgg16"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1x28x28"), std::string::npos) << msg;
  }
  // Built for 32x32 but fed 28x28: the forward check names the model too.
  cfg.height = cfg.width = 32;
  auto m = build_model("vgg11_bn", cfg);
  EXPECT_EQ((*m)(Tensor::empty({2, 1, 32, 32}, DType::f32, meta_device())).shape(), (Shape{2, 10}));
  try {
    (*m)(Tensor::empty({2, 1, 28, 28}, DType::f32, meta_device()));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("vgg11_bn: input 1x28x28"), std::string::npos) << e.what();
  }
  // ResNets take Fashion-MNIST-sized inputs.
  ModelConfig rc = meta_config("resnet18", 10);
  rc.in_channels = 1; rc.height = rc.width = 28;
  EXPECT_EQ((*build_model("resnet18", rc))(Tensor::empty({2, 1, 28, 28}, DType::f32, meta_device())).shape(),
            (Shape{2, 10}));
}

TEST(ModelZoo, UnknownNameListsValidNames) {
  try {
    build_model("resnet19", ModelConfig{});
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("resnet19"), std::string::npos);
    for (const std::string& n : model_names()) EXPECT_NE(msg.find(n), std::string::npos) << n;
  }
  EXPECT_THROW(default_image_size("alexnet"), ValueError);
  EXPECT_EQ(model_names().size(), 17u);
}

TEST(ModelZoo, TrainEvalPropagates) {
  auto m = build_model("resnet20", meta_config("resnet20", 10));
  m->eval();
  for (auto& [n, mod] : m->named_modules()) EXPECT_FALSE(mod->is_training()) << n;
  m->train();
  for (auto& [n, mod] : m->named_modules()) EXPECT_TRUE(mod->is_training()) << n;
}

TEST(ModelZoo, CpuForwardBackwardResNet20AndMlp) {
  for (const char* name : {"resnet20", "mlp"}) {
    ModelConfig cfg = default_model_config(name);
    cfg.seed = 3;
    auto m = build_model(name, cfg);
    Tensor x = Tensor::uniform({2, 1, 28, 28}, 0.0, 1.0);
    Tensor t = Tensor::from_vector_i64({3, 7}, {2});
    Tensor logits = (*m)(x);
    ASSERT_EQ(logits.shape(), (Shape{2, 10})) << name;
    Tensor loss = cross_entropy(logits, t);
    double l = loss.item();
    EXPECT_TRUE(std::isfinite(l)) << name;
    EXPECT_GT(l, 0.5) << name;   // ~log(10) for a fresh model
    loss.backward();
    for (auto& [n, p] : m->named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << name << " " << n;
      EXPECT_EQ(p.grad().shape(), p.shape()) << n;
      double s = 0;
      for (double v : p.grad().to_vector()) { EXPECT_TRUE(std::isfinite(v)) << n; s += std::abs(v); }
      EXPECT_GT(s, 0.0) << name << " " << n;
    }
    m->zero_grad();
    for (auto& [n, p] : m->named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;
  }
}

TEST(ModelZoo, BatchNormBuffersUpdateOnlyInTraining) {
  auto m = build_model("resnet20", default_model_config("resnet20"));
  auto* bn = dynamic_cast<nn::BatchNorm2d*>(m->submodule("bn1"));
  ASSERT_NE(bn, nullptr);
  EXPECT_EQ(bn->running_var.to_vector(), std::vector<double>(16, 1.0));
  Tensor x = Tensor::uniform({2, 1, 28, 28}, 0.0, 1.0);
  (*m)(x);
  EXPECT_EQ(bn->num_batches_tracked.to_vector_i64(), (std::vector<int64_t>{1}));
  EXPECT_NE(bn->running_mean.to_vector(), std::vector<double>(16, 0.0));
  m->eval();
  auto rm = bn->running_mean.to_vector();
  (*m)(x);
  EXPECT_EQ(bn->num_batches_tracked.to_vector_i64(), (std::vector<int64_t>{1}));
  EXPECT_EQ(bn->running_mean.to_vector(), rm);
}

TEST(ModelZoo, InitIsSeededAndFollowsTorchvision) {
  ModelConfig cfg = default_model_config("resnet20");
  auto a = build_model("resnet20", cfg), b = build_model("resnet20", cfg);
  cfg.seed = 1;
  auto c = build_model("resnet20", cfg);
  auto sa = a->state_dict(), sb = b->state_dict(), sc = c->state_dict();
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i].second.dtype() == DType::i64) continue;
    EXPECT_EQ(sa[i].second.to_vector(), sb[i].second.to_vector()) << sa[i].first;
  }
  EXPECT_NE(sa[0].second.to_vector(), sc[0].second.to_vector());
  // load_state_dict copies values across.
  c->load_state_dict(sa);
  EXPECT_EQ(c->state_dict()[0].second.to_vector(), sa[0].second.to_vector());
  // kaiming_normal(fan_out, relu): layer3.1.conv1 is [64, 64, 3, 3], std = sqrt(2 / 576).
  auto w = a->submodule("layer3.1.conv1")->named_parameters()[0].second.to_vector();
  double mean = 0, sq = 0;
  for (double v : w) mean += v;
  mean /= double(w.size());
  for (double v : w) sq += (v - mean) * (v - mean);
  double sd = std::sqrt(sq / double(w.size()));
  EXPECT_NEAR(mean, 0.0, 0.003);
  EXPECT_NEAR(sd, std::sqrt(2.0 / 576.0), 0.03 * std::sqrt(2.0 / 576.0));
  // fc: U(-1/sqrt(64), 1/sqrt(64)) for weight and bias.
  for (auto& [n, p] : a->submodule("fc")->named_parameters())
    for (double v : p.to_vector()) EXPECT_LE(std::abs(v), 0.125) << n;
  auto* bn = dynamic_cast<nn::BatchNorm2d*>(a->submodule("layer2.0.downsample.1"));
  ASSERT_NE(bn, nullptr);
  EXPECT_EQ(bn->weight.to_vector(), std::vector<double>(32, 1.0));
  EXPECT_EQ(bn->bias.to_vector(), std::vector<double>(32, 0.0));
}

TEST(NnInit, NormalAndUniformMoments) {
  Generator g{42, 0};
  Tensor t = Tensor::empty({100001}, DType::f64);
  nn::init::normal_(t, 0.0, 0.01, g);
  auto v = t.to_vector();
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= double(v.size());
  for (double x : v) s += (x - m) * (x - m);
  EXPECT_NEAR(m, 0.0, 1e-4);
  EXPECT_NEAR(std::sqrt(s / double(v.size())), 0.01, 2e-4);
  EXPECT_EQ(g.offset, 25001u);   // ceil(n / 4) Philox blocks
  nn::init::uniform_(t, -2.0, 3.0, g);
  v = t.to_vector();
  EXPECT_GE(*std::min_element(v.begin(), v.end()), -2.0);
  EXPECT_LT(*std::max_element(v.begin(), v.end()), 3.0);
  std::set<double> distinct(v.begin(), v.end());
  EXPECT_GT(distinct.size(), v.size() - 10);
}

TEST(Module, ForwardAllocationsCarryLayerNames) {
  auto m = build_model("mlp", default_model_config("mlp"));
  CachingAllocator& alloc = allocator_for(cpu_device());
  alloc.record_history(true);
  alloc.clear_trace();
  (*m)(Tensor::uniform({2, 1, 28, 28}, 0.0, 1.0));
  alloc.record_history(false);
  std::set<std::string> frames;
  for (const TraceEvent& e : alloc.trace())
    if (e.action == "alloc") frames.insert(e.frame);
  EXPECT_TRUE(frames.count("1/fwd")) << "first Linear";
  EXPECT_TRUE(frames.count("5/fwd")) << "last Linear";
  // The forward observer sees every module once, children before their parent.
  std::vector<std::string> seen;
  {
    nn::ForwardObserverGuard guard([&](const nn::Module& mod, const Tensor&, const Tensor& out) {
      seen.push_back(mod.full_name() + ":" + shape_str(out.shape()));
    });
    (*m)(Tensor::zeros({2, 1, 28, 28}));
  }
  ASSERT_EQ(seen.size(), 7u);
  EXPECT_EQ(seen[0], "0:[2, 784]");
  EXPECT_EQ(seen[6], ":[2, 10]");
}

TEST(Module, SequentialNamesAndReluInplace) {
  nn::Sequential s;
  s.push_back(std::make_shared<nn::Linear>(3, 4));
  s.push_back(std::make_shared<nn::ReLU>(true));
  s.push_back(std::make_shared<nn::Identity>());
  EXPECT_EQ(keys(s.named_parameters()), (std::vector<std::string>{"0.weight", "0.bias"}));
  auto mods = s.named_modules();
  ASSERT_EQ(mods.size(), 4u);
  EXPECT_EQ(mods[3].first, "2");
  Tensor y = s(Tensor::from_vector({1, -2, 3, -1, 0, 2}, {2, 3}));
  for (double v : y.to_vector()) EXPECT_GE(v, 0.0);
  EXPECT_THROW(nn::Conv2d(3, 4, 3, nn::Conv2dOptions{.groups = 2}), ValueError);
}
