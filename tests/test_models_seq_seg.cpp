// test_models_seq_seg.cpp — the sequence / segmentation / tiny models of the zoo:
// bert-* (HF BertForSequenceClassification layout), unet / unet-small and tiny-ff.
// Parameter counts against closed formulas (bert-base's BertModel = 109,482,240 exactly),
// state_dict key spot checks, meta forward shapes, a small cpu forward + backward with
// finite grads, BERT padding invariance, bad-config errors, and meta == cpu allocation
// traces for one training step.
// ctest tier: models
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "engine/core/error.h"
#include "engine/nn/transformer_layers.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/loss.h"
#include "engine/optim/optimizer.h"
#include "models/model_zoo.h"
#include "tests/gradcheck.h"

using namespace oomlab;

namespace {

ModelConfig meta_cfg(const std::string& name) {
  ModelConfig c = default_model_config(name);
  c.device = meta_device();
  return c;
}

int64_t count_prefix(const nn::Module& m, const std::string& prefix) {
  int64_t n = 0;
  for (auto& [k, p] : m.named_parameters())
    if (k.rfind(prefix, 0) == 0) n += p.numel();
  return n;
}

std::set<std::string> keys(const nn::Module& m) {
  std::set<std::string> s;
  for (auto& [k, t] : m.state_dict()) s.insert(k);
  return s;
}

int64_t unet_params(int64_t in, int64_t base, int64_t depth, int64_t classes) {
  auto dc = [](int64_t i, int64_t o) { return 9 * i * o + 2 * o + 9 * o * o + 2 * o; };
  int64_t n = 0, c = in;
  for (int64_t l = 0; l < depth; ++l) { n += dc(c, base << l); c = base << l; }
  n += dc(c, base << depth);
  c = base << depth;
  for (int64_t l = 0; l < depth; ++l) { n += c * (c / 2) * 4 + c / 2 + dc(c, c / 2); c /= 2; }
  return n + c * classes + classes;
}

Tensor ids_tensor(const std::vector<int64_t>& v, int64_t B, int64_t T, Device d = cpu_device()) {
  return Tensor::from_vector_i64(v, {B, T}, d);
}

void expect_finite_grads(const nn::Module& m, const std::string& name) {
  for (auto& [k, p] : m.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name << " " << k;
    ASSERT_EQ(p.grad().shape(), p.shape()) << name << " " << k;
    for (double g : p.grad().to_vector()) ASSERT_TRUE(std::isfinite(g)) << name << " " << k;
  }
}

}  // namespace

TEST(SeqSegModels, Registered) {
  auto names = model_names();
  for (const char* n : {"bert-tiny", "bert-mini", "bert-small", "bert-base", "unet", "unet-small", "tiny-ff"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_EQ(model_input_kind("bert-mini"), InputKind::tokens);
  EXPECT_EQ(model_input_kind("unet"), InputKind::image);
  EXPECT_EQ(model_input_kind("resnet18"), InputKind::image);
  EXPECT_EQ(model_task_kind("unet-small"), TaskKind::segmentation);
  EXPECT_EQ(model_task_kind("bert-base"), TaskKind::classification);
  EXPECT_EQ(model_task_kind("tiny-ff"), TaskKind::classification);
  ModelConfig b = default_model_config("bert-base");
  EXPECT_EQ(b.seq_len, 128);
  EXPECT_EQ(b.num_classes, 2);
  EXPECT_EQ(model_input_shape("bert-base", b, 4), (Shape{4, 128}));
  ModelConfig u = default_model_config("unet");
  EXPECT_EQ(model_input_shape("unet", u, 2), (Shape{2, 3, 256, 256}));
  EXPECT_EQ(u.num_classes, 2);
  EXPECT_EQ(model_input_shape("unet-small", default_model_config("unet-small"), 1), (Shape{1, 3, 64, 64}));
  ModelConfig t = default_model_config("tiny-ff");
  EXPECT_EQ(model_input_shape("tiny-ff", t, 8), (Shape{8, 1, 28, 28}));
  EXPECT_EQ(t.num_classes, 10);
  EXPECT_THROW(model_input_kind("bert-huge"), ValueError);
}

TEST(SeqSegModels, BertParameterCounts) {
  const std::vector<std::pair<std::string, int64_t>> expected = {
      {"bert-base", 109482240}, {"bert-tiny", 4385920}, {"bert-mini", 11170560}, {"bert-small", 28763648}};
  for (auto& [name, n] : expected) {
    ModelConfig c = meta_cfg(name);
    BertShape s = bert_shape(name, c);
    EXPECT_EQ(bert_parameter_count(s), n) << name;
    auto m = build_model(name, c);
    EXPECT_EQ(count_prefix(*m, "bert."), n) << name;
    EXPECT_EQ(m->num_parameters(), n + s.hidden * 2 + 2) << name;   // + classifier
  }
  // Overrides change the count as the formula says.
  ModelConfig c = meta_cfg("bert-tiny");
  c.hidden = 64; c.layers = 3; c.heads = 4; c.vocab_size = 1000; c.max_positions = 64; c.seq_len = 32;
  c.num_classes = 5;
  auto m = build_model("bert-tiny", c);
  BertShape s = bert_shape("bert-tiny", c);
  EXPECT_EQ(s.intermediate, 256);
  EXPECT_EQ(count_prefix(*m, "bert."), bert_parameter_count(s));
  EXPECT_EQ(m->num_parameters(), bert_parameter_count(s) + 64 * 5 + 5);
}

TEST(SeqSegModels, BertStateDictKeys) {
  auto m = build_model("bert-tiny", meta_cfg("bert-tiny"));
  auto k = keys(*m);
  for (const char* key :
       {"bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
        "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight",
        "bert.embeddings.LayerNorm.bias", "bert.encoder.layer.0.attention.self.query.weight",
        "bert.encoder.layer.0.attention.self.key.bias", "bert.encoder.layer.1.attention.self.value.weight",
        "bert.encoder.layer.1.attention.output.dense.weight", "bert.encoder.layer.1.attention.output.LayerNorm.bias",
        "bert.encoder.layer.0.intermediate.dense.weight", "bert.encoder.layer.0.output.dense.bias",
        "bert.encoder.layer.1.output.LayerNorm.weight", "bert.pooler.dense.weight", "bert.pooler.dense.bias",
        "classifier.weight", "classifier.bias"})
    EXPECT_TRUE(k.count(key)) << key;
  EXPECT_FALSE(k.count("bert.encoder.layer.2.output.dense.weight"));
  // HF BertModel has 5 + 16 per layer + 2 tensors; + 2 for the classifier.
  EXPECT_EQ(k.size(), size_t(5 + 16 * 2 + 2 + 2));
  auto sd = m->state_dict();
  EXPECT_EQ(sd.front().first, "bert.embeddings.word_embeddings.weight");
  EXPECT_EQ(sd.front().second.shape(), (Shape{30522, 128}));
  EXPECT_EQ(sd.back().first, "classifier.bias");
}

TEST(SeqSegModels, UNetAndTinyFFCountsAndKeys) {
  auto u = build_model("unet", meta_cfg("unet"));
  EXPECT_EQ(u->num_parameters(), unet_params(3, 64, 4, 2));
  EXPECT_EQ(unet_params(3, 64, 4, 2), 31037698);   // the usual BN UNet (bilinear=false) count
  auto us = build_model("unet-small", meta_cfg("unet-small"));
  EXPECT_EQ(us->num_parameters(), unet_params(3, 16, 4, 2));
  ModelConfig c = meta_cfg("unet");
  c.base_width = 8; c.depth = 2; c.in_channels = 1; c.num_classes = 4; c.height = c.width = 12;
  EXPECT_EQ(build_model("unet", c)->num_parameters(), unet_params(1, 8, 2, 4));
  auto k = keys(*us);
  for (const char* key : {"encoder.0.0.weight", "encoder.0.1.running_mean", "encoder.3.4.bias", "bottleneck.0.weight",
                          "up.0.weight", "up.0.bias", "up.3.weight", "decoder.3.3.weight", "final.weight",
                          "final.bias"})
    EXPECT_TRUE(k.count(key)) << key;
  auto ff = build_model("tiny-ff", meta_cfg("tiny-ff"));
  EXPECT_EQ(ff->num_parameters(), 669706);
  EXPECT_TRUE(keys(*ff).count("5.bias"));
}

TEST(SeqSegModels, ForwardShapesOnMeta) {
  for (const char* name : {"bert-tiny", "bert-mini", "bert-small", "bert-base"}) {
    ModelConfig c = meta_cfg(name);
    c.num_classes = 3;
    auto m = build_model(name, c);
    Tensor ids = Tensor::empty(model_input_shape(name, c, 2), DType::i64, meta_device());
    Tensor y = (*m)(ids);
    EXPECT_EQ(y.shape(), (Shape{2, 3})) << name;
    EXPECT_TRUE(y.device().is_meta());
  }
  for (const char* name : {"unet", "unet-small", "tiny-ff"}) {
    ModelConfig c = meta_cfg(name);
    auto m = build_model(name, c);
    Tensor x = Tensor::empty(model_input_shape(name, c, 2), DType::f32, meta_device());
    Tensor y = (*m)(x);
    if (model_task_kind(name) == TaskKind::segmentation)
      EXPECT_EQ(y.shape(), (Shape{2, c.num_classes, c.height, c.width})) << name;
    else
      EXPECT_EQ(y.shape(), (Shape{2, c.num_classes})) << name;
  }
}

TEST(SeqSegModels, BertTinyCpuForwardBackward) {
  ModelConfig c = default_model_config("bert-tiny");
  c.vocab_size = 100;   // small embedding table keeps the test fast
  c.seed = 3;
  auto m = build_model("bert-tiny", c);
  Tensor ids = ids_tensor({5, 17, 42, 8, 99, 3, 0, 0, 7, 7, 1, 2, 0, 0, 0, 0}, 2, 8);
  Tensor logits = (*m)(ids);
  ASSERT_EQ(logits.shape(), (Shape{2, 2}));
  for (double v : logits.to_vector()) EXPECT_TRUE(std::isfinite(v));
  Tensor loss = cross_entropy(logits, Tensor::from_vector_i64({1, 0}, {2}));
  EXPECT_TRUE(std::isfinite(loss.item()));
  loss.backward();
  expect_finite_grads(*m, "bert-tiny");
  // The padding row of the word embeddings gets no gradient and is zero-initialised.
  auto sd = m->state_dict();
  Tensor w = sd.front().second, g = w.grad();
  for (int64_t j = 0; j < 128; ++j) {
    EXPECT_EQ(w.to_vector()[size_t(j)], 0.0);
    EXPECT_EQ(g.to_vector()[size_t(j)], 0.0);
  }
}

TEST(SeqSegModels, BertPaddingInvariance) {
  ModelConfig c = default_model_config("bert-tiny");
  c.vocab_size = 64;
  c.num_classes = 4;
  auto m = build_model("bert-tiny", c);
  m->eval();
  std::vector<double> a = (*m)(ids_tensor({11, 23, 5, 9, 31}, 1, 5)).to_vector();
  std::vector<double> b = (*m)(ids_tensor({11, 23, 5, 9, 31, 0, 0, 0, 0}, 1, 9)).to_vector();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
  // Changing a real token does change the logits (the mask is not hiding everything).
  std::vector<double> d = (*m)(ids_tensor({11, 23, 5, 9, 30, 0, 0, 0, 0}, 1, 9)).to_vector();
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff += std::fabs(a[i] - d[i]);
  EXPECT_GT(diff, 1e-7);
}

TEST(SeqSegModels, UNetSmallCpuForwardBackward) {
  ModelConfig c = default_model_config("unet-small");
  c.height = c.width = 32;
  c.seed = 1;
  auto m = build_model("unet-small", c);
  Tensor x = Tensor::uniform({2, 3, 32, 32}, -1.0, 1.0);
  Tensor y = (*m)(x);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 32, 32}));
  std::vector<int64_t> t(2 * 32 * 32);
  for (size_t i = 0; i < t.size(); ++i) t[i] = int64_t((i / 7) % 2);
  Tensor loss = pixel_cross_entropy(y, Tensor::from_vector_i64(t, {2, 32, 32}));
  EXPECT_TRUE(std::isfinite(loss.item()));
  loss.backward();
  expect_finite_grads(*m, "unet-small");
}

TEST(SeqSegModels, BadConfigsFailClearly) {
  ModelConfig c = meta_cfg("bert-tiny");
  c.hidden = 130;   // 2 heads: fine; 3 heads: not divisible
  c.heads = 3;
  try {
    build_model("bert-tiny", c);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("130"), std::string::npos) << msg;
    EXPECT_NE(msg.find("3"), std::string::npos) << msg;
  }
  c = meta_cfg("bert-tiny");
  c.seq_len = 513;
  EXPECT_THROW(build_model("bert-tiny", c), ValueError);
  c.seq_len = 16; c.max_positions = 16;
  auto m = build_model("bert-tiny", c);
  EXPECT_THROW((*m)(Tensor::empty({1, 17}, DType::i64, meta_device())), ValueError);   // too long at forward
  EXPECT_THROW((*m)(Tensor::empty({1, 16}, DType::f32, meta_device())), DTypeError);
  // Token id out of the vocabulary: the embedding names the id.
  ModelConfig cc = default_model_config("bert-tiny");
  cc.vocab_size = 50;
  auto mc = build_model("bert-tiny", cc);
  try {
    (*mc)(ids_tensor({1, 2, 50}, 1, 3));
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("50"), std::string::npos) << e.what();
  }
  // UNet: sizes not divisible by 2^depth.
  ModelConfig u = meta_cfg("unet-small");
  u.height = u.width = 40;
  try {
    build_model("unet-small", u);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("unet-small"), std::string::npos) << msg;
    EXPECT_NE(msg.find("3x40x40"), std::string::npos) << msg;
  }
  auto um = build_model("unet-small", meta_cfg("unet-small"));
  EXPECT_THROW((*um)(Tensor::empty({1, 3, 48, 40}, DType::f32, meta_device())), ShapeError);
}

namespace {
std::vector<TraceEvent> record_step(const std::string& name, Device dev) {
  reset_allocators();
  CachingAllocator& al = allocator_for(dev);
  al.record_history(true);
  ModelConfig c = default_model_config(name);
  c.device = dev;
  if (name == "bert-tiny") c.vocab_size = 200;
  else { c.height = c.width = 32; }
  nn::ModulePtr model = build_model(name, c);
  ParamGroup g;
  g.params = model->named_parameters();
  g.lr = 0.01;
  auto opt = make_optimizer("adam", {g});
  for (int step = 0; step < 2; ++step) {
    opt->zero_grad();
    Tensor loss;
    if (name == "bert-tiny") {
      std::vector<int64_t> ids = {5, 17, 42, 8, 99, 3, 0, 0, 7, 7, 1, 2, 0, 0, 0, 0};
      Tensor x = Tensor::from_vector_i64(ids, {2, 8}, dev);
      if (dev.is_cpu() || dev.is_meta()) loss = cross_entropy((*model)(x), Tensor::from_vector_i64({1, 0}, {2}, dev));
    } else {
      Tensor x = Tensor::empty({2, 3, 32, 32}, DType::f32, dev);
      if (dev.is_cpu()) x.fill_(0.25);
      std::vector<int64_t> t(2 * 32 * 32, 1);
      loss = pixel_cross_entropy((*model)(x), Tensor::from_vector_i64(t, {2, 32, 32}, dev));
    }
    loss.backward();
    opt->step();
  }
  std::vector<TraceEvent> tr = al.trace();
  al.record_history(false);
  return tr;
}
}  // namespace

TEST(SeqSegModels, MetaTraceEqualsCpu) {
  for (const char* name : {"bert-tiny", "unet-small"}) {
    auto cpu = record_step(name, cpu_device());
    auto meta = record_step(name, meta_device());
    if (cpu.size() != meta.size())
      for (size_t i = 0; i < std::max(cpu.size(), meta.size()); ++i) {
        if (i < cpu.size() && i < meta.size() && cpu[i].action == meta[i].action && cpu[i].size == meta[i].size &&
            cpu[i].frame == meta[i].frame)
          continue;
        for (size_t j = i; j < i + 8; ++j)
          std::printf("%zu cpu %s %zu %s | meta %s %zu %s\n", j, j < cpu.size() ? cpu[j].action.c_str() : "-",
                      j < cpu.size() ? cpu[j].size : 0, j < cpu.size() ? cpu[j].frame.c_str() : "-",
                      j < meta.size() ? meta[j].action.c_str() : "-", j < meta.size() ? meta[j].size : 0,
                      j < meta.size() ? meta[j].frame.c_str() : "-");
        break;
      }
    ASSERT_EQ(cpu.size(), meta.size()) << name;
    ASSERT_GT(cpu.size(), 10u);
    for (size_t i = 0; i < cpu.size(); ++i) {
      ASSERT_EQ(cpu[i].action, meta[i].action) << name << " event " << i;
      ASSERT_EQ(cpu[i].size, meta[i].size) << name << " event " << i;
      ASSERT_EQ(cpu[i].frame, meta[i].frame) << name << " event " << i;
    }
  }
}

TEST(SeqSegModels, TanhComposedMatchesStdAndGradchecks) {
  Tensor x = oomlab::testing::leaf(oomlab::testing::random_f64({3, 5}, -3.0, 3.0));
  std::vector<double> xv = x.to_vector(), yv = nn::tanh_composed(x).to_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(yv[i], std::tanh(xv[i]), 1e-12);
  EXPECT_TRUE(oomlab::testing::gradcheck([](const std::vector<Tensor>& in) { return nn::tanh_composed(in[0]); }, {x}));
}

// End to end: every parameter of a tiny float64 BERT (with padding) and UNet against
// central differences, so the composition (head split/merge views, mask, pooler, skips,
// transposed convs, cat) is checked, not only the ops.
TEST(SeqSegModels, TinyModelsGradcheck) {
  ModelConfig c = default_model_config("bert-tiny");
  c.dtype = DType::f64;
  c.hidden = 8; c.heads = 2; c.layers = 1; c.vocab_size = 12; c.max_positions = 8; c.seq_len = 5;
  c.num_classes = 3; c.dropout = 0.0;
  auto m = build_model("bert-tiny", c);
  Tensor ids = ids_tensor({3, 7, 11, 0, 0, 5, 1, 2, 9, 0}, 2, 5);
  std::vector<Tensor> params = m->parameters();
  EXPECT_TRUE(
      oomlab::testing::gradcheck([&](const std::vector<Tensor>&) { return (*m)(ids); }, params, 1e-6, 1e-6, 1e-4));

  ModelConfig u = default_model_config("unet-small");
  u.dtype = DType::f64;
  u.base_width = 2; u.depth = 1; u.in_channels = 1; u.height = u.width = 4; u.num_classes = 2;
  auto un = build_model("unet-small", u);
  Tensor x = oomlab::testing::leaf(oomlab::testing::random_f64({2, 1, 4, 4}));
  std::vector<Tensor> inputs = un->parameters();
  inputs.push_back(x);
  EXPECT_TRUE(
      oomlab::testing::gradcheck([&](const std::vector<Tensor>&) { return (*un)(x); }, inputs, 1e-6, 1e-6, 1e-4));
}
