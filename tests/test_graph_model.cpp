// test_graph_model.cpp — the model-graph importer (models/graph_model.h) on the seed graph of
// the fuzz corpus (a small CNN in the exporter's layout: convolution, batch norm, relu, max
// pool, view, permute + addmm): state_dict names and the parameter count are the graph's; in
// training mode the output, the running statistics, num_batches_tracked and every gradient
// equal the same ops called directly, bit for bit; another batch than the example's runs;
// the meta device runs it; unsupported ops are listed all at once, unsupported uses name
// their node; a token graph (the BERT seed) folds its constants and runs its attention; the
// CLI's --model graph:FILE (summary rows per module path, train, exit 2).
// ctest tier: models cli
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/ops/activation.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/conv.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/linear.h"
#include "engine/ops/loss.h"
#include "engine/ops/pool.h"
#include "models/graph_model.h"
#include "tests/cli_test_util.h"
#include "tests/gradcheck.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using oomlab::testing::tensor_bytes;
using json = nlohmann::json;

namespace {
const std::string kSeed = std::string(OOMLAB_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_model_graph/small_cnn.json";

Tensor copy_of(const Tensor& t, bool grad) {
  Tensor c = t.detach().clone();
  if (grad) c.set_requires_grad(true);
  return c;
}

TEST(GraphModel, NamesAndCountsAreTheGraphs) {
  const ModelGraph g = read_model_graph(kSeed);
  nn::ModulePtr m = build_graph_model(g, ModelConfig{});
  EXPECT_EQ(m->num_parameters(), g.parameter_count());
  std::vector<std::string> names, want;
  for (auto& [n, t] : m->state_dict()) names.push_back(n);
  for (const GraphParameter& p : g.parameters) want.push_back(p.name);
  EXPECT_EQ(names, want);
  EXPECT_STREQ(m->submodule("bn")->type_name(), "BatchNorm2d");
}

TEST(GraphModel, TrainingStepEqualsTheOpsCalledDirectly) {
  const ModelGraph g = read_model_graph(kSeed);
  ModelConfig cfg;
  cfg.seed = 5;
  nn::ModulePtr m = build_graph_model(g, cfg);
  m->train();
  std::map<std::string, Tensor> p;
  for (auto& [n, t] : m->state_dict()) p[n] = copy_of(t, t.requires_grad());
  Tensor x = oomlab::testing::random_f64({2, 3, 8, 8}, -1, 1, 9).to(DType::f32);
  Tensor target = Tensor::from_vector({3, 7}, {2}, DType::i64);
  cross_entropy((*m)(x), target).backward();
  Tensor h = batch_norm(conv2d(x, p["conv.weight"], Tensor(), Conv2dParams{1, 1, 1, 1}), p["bn.weight"],
                        p["bn.bias"], p["bn.running_mean"], p["bn.running_var"], true, 0.1, 1e-5);
  h = max_pool2d(relu(h), Pool2dParams{2, 2, 2, 2}).reshape({2, 64});
  Tensor y = linear(h, p["fc.weight"], p["fc.bias"]);
  cross_entropy(y, target).backward();
  for (auto& [n, t] : m->state_dict()) {
    SCOPED_TRACE(n);
    if (n == "bn.num_batches_tracked") {
      EXPECT_EQ(t.item(), 1.0);
      continue;
    }
    EXPECT_EQ(tensor_bytes(t), tensor_bytes(p[n]));
    if (t.requires_grad()) {
      EXPECT_EQ(tensor_bytes(t.grad()), tensor_bytes(p[n].grad()));
    }
  }
}

TEST(GraphModel, AnotherBatchAndTheMetaDeviceRun) {
  const ModelGraph g = read_model_graph(kSeed);
  nn::ModulePtr m = build_graph_model(g, ModelConfig{});
  EXPECT_EQ((*m)(Tensor::zeros({5, 3, 8, 8})).shape(), (Shape{5, 10}));
  ModelConfig meta;
  meta.device = meta_device();
  nn::ModulePtr mm = build_graph_model(g, meta);
  Tensor y = (*mm)(Tensor::zeros({4, 3, 8, 8}, DType::f32, meta_device()));
  EXPECT_EQ(y.shape(), (Shape{4, 10}));
  EXPECT_NO_THROW(sum_all(y).backward());
}

// The token seed (the first attention block of the Hugging Face BERT export): position and
// token-type ids fold on the host from the buffers' values, the all-true mask folds away, and
// the embeddings, layer norm, projections and attention run at another batch than the export's.
TEST(GraphModel, TokenGraphFoldsItsConstantsAndRunsItsAttention) {
  const std::string seed = std::string(OOMLAB_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_model_graph/bert_attention.json";
  const ModelGraph g = read_model_graph(seed);
  int with_values = 0;
  for (const GraphParameter& p : g.parameters) with_values += !p.values.empty();
  EXPECT_EQ(with_values, 2);   // position_ids, token_type_ids
  ModelConfig meta;
  meta.device = meta_device();
  for (bool fused : {false, true}) {
    meta.fused_attention = fused;
    nn::ModulePtr m = build_graph_model(g, meta);
    Tensor y = (*m)(Tensor::zeros({3, 128}, DType::i64, meta_device()));
    EXPECT_EQ(y.shape(), (Shape{3, 12, 128, 64}));
  }
  json j = json::parse(read_file(seed));
  for (json& n : j["nodes"])
    if (n["op"] == "aten.scaled_dot_product_attention.default") n["kwargs"]["scale"] = 0.5;
  nn::ModulePtr m = build_graph_model(parse_model_graph(j.dump(), "g.json"), meta);
  try {
    (*m)(Tensor::zeros({3, 128}, DType::i64, meta_device()));
    ADD_FAILURE() << "ran an attention with another scale";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("an attention scale other than 1/sqrt(head dim) is not supported yet"),
              std::string::npos) << e.what();
  }
}

TEST(GraphModel, UnsupportedOpsAreListedAndUsesNamed) {
  json j = json::parse(read_file(kSeed));
  j["nodes"][3]["op"] = "aten.upsample_nearest3d.vec";
  j["nodes"][6]["op"] = "aten.fancy.default";
  try {
    build_graph_model(parse_model_graph(j.dump(), "g.json"), ModelConfig{});
    ADD_FAILURE() << "accepted";
  } catch (const NotImplementedError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("2 node(s) use ops oomlab does not have yet, in module(s) relu (ReLU):"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("aten.upsample_nearest3d.vec (node 'relu', module 'relu' (ReLU))"), std::string::npos) << msg;
    EXPECT_NE(msg.find("aten.fancy.default (node 'view')"), std::string::npos) << msg;
  }
  j = json::parse(read_file(kSeed));
  j["nodes"][0]["args"][6] = true;
  nn::ModulePtr m = build_graph_model(parse_model_graph(j.dump(), "g.json"), ModelConfig{});
  try {
    (*m)(Tensor::zeros({2, 3, 8, 8}));
    ADD_FAILURE() << "ran a transposed convolution";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "node 'convolution' (aten.convolution.default) in module 'conv' (Conv2d): a transposed convolution"),
              std::string::npos)
        << e.what();
  }
}
}  // namespace

// The CLI: `--model graph:FILE` on summary and train; a graph with ops oomlab lacks and a
// missing file are exit-2 errors naming what is wrong.
namespace {
TEST(GraphModelCli, CommandsTakeAGraphAndRefuseBadOnes) {
  const std::string model = "--model graph:" + kSeed;
  CliRun r = run_oomlab("summary " + model + " --batch 2");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fc                           Linear"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("total params 766"), std::string::npos) << r.output;
  r = run_oomlab("train " + model + " --dataset synthetic --batch 4 --steps 2 --synthetic-size 8 --eval-batches 0");
  EXPECT_EQ(r.code, 0) << r.output;
  json j = json::parse(read_file(kSeed));
  j["nodes"][3]["op"] = "aten.upsample_nearest3d.vec";
  j["nodes"][6]["op"] = "aten.fancy.default";
  const std::string bad =
      (std::filesystem::temp_directory_path() / ("oomlab_graph_" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(bad) << j.dump();
  r = run_oomlab("estimate --model graph:" + bad + " --batch 2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("aten.upsample_nearest3d.vec (node 'relu', module 'relu' (ReLU))"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("aten.fancy.default (node 'view')"), std::string::npos) << r.output;
  std::filesystem::remove(bad);
  r = run_oomlab("estimate --model graph:/nonexistent/g.json --batch 2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/g.json"), std::string::npos) << r.output;
}
}  // namespace
