// test_graph_import_zoo.cpp — the importer is faithful (issue 32): graphs that
// scripts/export_model.py wrote from the real torchvision models (models/graphs/, with the
// batch symbolic, and tests/fixtures/graphs/vgg16.json, an older static-batch export; committed
// so that CI needs no PyTorch; regenerate with the commands in those folders' READMEs) give the zoo model's parameter
// count, state_dict names and shapes, per-layer table (output and saved bytes of every module) and exact training meta
// peak, to the byte; vgg16's step memory is the zoo's without dropout; the Hugging Face BERT-base export
// (BertForSequenceClassification, attention kept as scaled_dot_product_attention) has the zoo bert-base's parameters
// and, with the zoo's weights and unpadded input, the same logits and gradients, bit for bit; exported with an
// attention_mask input (bert_padded.json), the same on padded input too.
// Inference (summary's forward-only peak) frees values as eager PyTorch does, and that is one
// tensor less than the zoo's C++ forward holds (see ForwardOnlyPeakFollowsPython).
// ctest tier: models
// ctest slow: GraphImportZoo.BertBaseStepEqualsTheZoos:GraphImportZoo.BertPaddedGraphStepEqualsTheZoosOnPaddedBatches
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "engine/core/rng.h"
#include "engine/io/atomic_file.h"
#include "engine/ops/loss.h"
#include "models/graph_model.h"
#include "models/model_zoo.h"
#include "tests/cli_test_util.h"
#include "tests/op_test_util.h"

using namespace oomlab;
using oomlab::testing::tensor_bytes;
using json = nlohmann::json;

namespace {
const std::string kGraphs = std::string(OOMLAB_SOURCE_DIR) + "/models/graphs/";
const std::string kStaticGraphs = std::string(OOMLAB_SOURCE_DIR) + "/tests/fixtures/graphs/";

json run_json(const std::string& args) {
  const std::string out = std::filesystem::temp_directory_path() /
                          ("graph_zoo_" + std::to_string(getpid()) + ".json");
  CliRun r = run_oomlab(args + " --json " + out);
  EXPECT_EQ(r.code, 0) << args << "\n" << r.output;
  json j = r.code == 0 ? json::parse(read_file(out)) : json();
  std::filesystem::remove(out);
  return j;
}

// The same names in the same order, each with the same shape (and dtype).
void expect_same_names_and_shapes(const nn::NamedTensors& a, const nn::NamedTensors& b, bool dtypes) {
  ASSERT_EQ(a.size(), b.size());
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    EXPECT_EQ(ia->first, ib->first);
    EXPECT_EQ(ia->second.shape(), ib->second.shape()) << ia->first;
    if (dtypes) {
      EXPECT_EQ(ia->second.dtype(), ib->second.dtype()) << ia->first;
    }
  }
}

TEST(GraphImportZoo, Resnet50NamesShapesAndCountAreTorchvisions) {
  const ModelGraph g = read_model_graph(kGraphs + "resnet50.json");
  ModelConfig meta;
  meta.device = meta_device();
  nn::ModulePtr imported = build_graph_model(g, meta);
  meta.num_classes = 1000;   // torchvision's (the CLI's default for resnet50 too)
  nn::ModulePtr zoo = build_model("resnet50", meta);
  EXPECT_EQ(imported->num_parameters(), 25557032);
  EXPECT_EQ(imported->num_parameters(), zoo->num_parameters());
  expect_same_names_and_shapes(imported->state_dict(), zoo->state_dict(), /*dtypes=*/true);
}

TEST(GraphImportZoo, Resnet50TrainingPeakAndLayersEqualTheZoos) {
  const std::string graph = "graph:" + kGraphs + "resnet50.json";
  for (const char* extra : {"--batch 8", "--batch 3 --amp bf16", "--batch 4 --optimizer adam"}) {
    json zoo = run_json(std::string("estimate --model resnet50 ") + extra);
    json imp = run_json("estimate --model " + graph + " " + extra);
    ASSERT_TRUE(zoo.contains("metrics") && imp.contains("metrics"));
    EXPECT_EQ(zoo["metrics"]["exact"], imp["metrics"]["exact"]) << extra;
    EXPECT_EQ(zoo["metrics"]["params"], imp["metrics"]["params"]) << extra;
  }
  json zoo = run_json("summary --model resnet50 --batch 2");
  json imp = run_json("summary --model " + graph + " --batch 2");
  ASSERT_TRUE(zoo.contains("metrics") && imp.contains("metrics"));
  EXPECT_EQ(zoo["metrics"]["layers"], imp["metrics"]["layers"]);
  for (const char* k : {"params", "saved_bytes", "training_forward_peak_bytes", "activation_values_per_sample"})
    EXPECT_EQ(zoo["metrics"]["totals"][k], imp["metrics"]["totals"][k]) << k;
}

// torchvision's vgg16 export is the zoo's vgg16 without its classifier dropout (the eval
// export has none): every allocated figure of a training step equal to the byte; the reserved
// peak at batch 32 too (at batch 8 the segments' history differs by one 2 MiB segment).
TEST(GraphImportZoo, Vgg16StepMemoryIsTheZoosWithoutDropout) {
  const std::string graph = "graph:" + kStaticGraphs + "vgg16.json";
  for (int batch : {8, 32}) {
    const std::string flags = " --batch " + std::to_string(batch);
    json zoo = run_json("estimate --model vgg16 --dropout 0" + flags)["metrics"]["exact"];
    json imp = run_json("estimate --model " + graph + flags)["metrics"]["exact"];
    ASSERT_TRUE(zoo.is_object() && imp.is_object());
    for (auto& [k, v] : zoo.items()) {
      if (k != "peak_reserved_bytes" || batch == 32) {
        EXPECT_EQ(imp[k], v) << k << flags;
      }
    }
  }
}

// Without autograd a value dies at its last use, except that a module call's input lives until
// the call returns (the caller's frame holds it: `x = self.layer1(x)`, a block's identity).
// torchvision's Bottleneck frees conv2's input when `out = self.conv2(out)` returns; the zoo's
// C++ `out = norm_relu(bn2, relu, conv2(out))` holds it through bn2: one [64, 56, 56] float32
// tensor per sample (layer1's), 802,816 bytes, and nothing else differs.
TEST(GraphImportZoo, ForwardOnlyPeakFollowsPython) {
  const std::string graph = "graph:" + kGraphs + "resnet50.json";
  for (int batch : {1, 4}) {
    json zoo = run_json("summary --model resnet50 --batch " + std::to_string(batch));
    json imp = run_json("summary --model " + graph + " --batch " + std::to_string(batch));
    ASSERT_TRUE(zoo.contains("metrics") && imp.contains("metrics"));
    const int64_t z = zoo["metrics"]["totals"]["forward_only_peak_bytes"];
    const int64_t i = imp["metrics"]["totals"]["forward_only_peak_bytes"];
    EXPECT_EQ(z - i, int64_t(batch) * 64 * 56 * 56 * 4) << "batch " << batch;
  }
}

ModelConfig bert_base_config() {
  ModelConfig cfg;
  cfg.num_classes = 2;   // BertForSequenceClassification's default num_labels
  cfg.seq_len = 128;
  cfg.dropout = 0.0;     // the export is the eval graph: no dropout
  return cfg;
}

TEST(GraphImportZoo, BertBaseParametersAreTheZoos) {
  ModelConfig cfg = bert_base_config();
  cfg.device = meta_device();
  nn::ModulePtr imported = build_graph_model(read_model_graph(kGraphs + "bert.json"), cfg);
  nn::ModulePtr zoo = build_model("bert-base", cfg);
  EXPECT_EQ(imported->num_parameters(), 109483778);   // HF: BertModel 109,482,240 + classifier 1,538
  EXPECT_EQ(imported->num_parameters(), zoo->num_parameters());
  expect_same_names_and_shapes(imported->named_parameters(), zoo->named_parameters(), /*dtypes=*/false);
}

// The zoo bert-base and the graph `file` with the zoo's weights copied in, one training step
// on `ids` [2, 128]: whether the logits and every gradient are the zoo's, bit for bit.
bool bert_step_equals_the_zoos(const std::string& file, const std::vector<int64_t>& ids, bool fused) {
  ModelConfig cfg = bert_base_config();
  cfg.fused_attention = fused;
  nn::ModulePtr zoo = build_model("bert-base", cfg);
  nn::ModulePtr imported = build_graph_model(read_model_graph(kGraphs + file), cfg);
  auto theirs = imported->named_parameters();
  int copied = 0;
  for (auto& [name, t] : zoo->named_parameters())
    for (auto& [n2, t2] : theirs)
      if (n2 == name) {
        Tensor dst = t2;
        dst.copy_(t);
        ++copied;
      }
  EXPECT_EQ(copied, int(zoo->named_parameters().size()));
  const Tensor x = Tensor::from_vector_i64(ids, {2, 128});
  const Tensor y = Tensor::from_vector_i64({0, 1}, {2});
  Tensor la = (*zoo)(x), lb = (*imported)(x);
  if (tensor_bytes(la) != tensor_bytes(lb)) return false;
  cross_entropy(la, y).backward();
  cross_entropy(lb, y).backward();
  bool same = true;
  for (auto& [name, t] : zoo->named_parameters())
    for (auto& [n2, t2] : theirs)
      if (n2 == name && tensor_bytes(t.grad()) != tensor_bytes(t2.grad())) {
        ADD_FAILURE() << file << ": gradient of " << name << " differs (fused " << fused << ")";
        same = false;
      }
  return same;
}

std::vector<int64_t> random_ids(uint64_t seed) {   // 2 x 128 ids, none 0 (the padding id)
  Generator gen{seed, 0};
  std::vector<int64_t> ids(2 * 128);
  for (int64_t& id : ids) id = 1 + int64_t(gen.next_below(30000));
  return ids;
}

// With the zoo's weights copied in and no padding token (the zoo masks id 0, the export's
// graph masks nothing), a training step at another batch than the export's gives the zoo's
// logits and every gradient bit for bit, eager and fused attention.
TEST(GraphImportZoo, BertBaseStepEqualsTheZoos) {
  for (bool fused : {false, true}) EXPECT_TRUE(bert_step_equals_the_zoos("bert.json", random_ids(7), fused)) << fused;
}

// The export called with an attention_mask (bert_padded.json: a second input, the mask built
// from it) on a padded batch (sample 1 ends in 40 padding ids): the importer derives the mask
// from the ids and runs it as the key padding mask, so the step is the zoo's bit for bit, eager
// and fused; the export without that input attends to the padding and differs.
TEST(GraphImportZoo, BertPaddedGraphStepEqualsTheZoosOnPaddedBatches) {
  std::vector<int64_t> ids = random_ids(8);
  std::fill(ids.begin() + 128 + 88, ids.end(), 0);
  for (bool fused : {false, true})
    EXPECT_TRUE(bert_step_equals_the_zoos("bert_padded.json", ids, fused)) << fused;
  ModelConfig cfg = bert_base_config();
  nn::ModulePtr zoo = build_model("bert-base", cfg),
                unmasked = build_graph_model(read_model_graph(kGraphs + "bert.json"), cfg);
  auto theirs = unmasked->named_parameters();
  for (auto& [name, t] : zoo->named_parameters())
    for (auto& [n2, t2] : theirs)
      if (n2 == name) {
        Tensor dst = t2;
        dst.copy_(t);
      }
  const Tensor x = Tensor::from_vector_i64(ids, {2, 128});
  EXPECT_NE(tensor_bytes((*zoo)(x)), tensor_bytes((*unmasked)(x)));
}

// From the CLI: the padded export trains on synthetic-seq batches of 40..128 tokens (each
// batch padded with id 0 to the exported 128, the padding masked); the unpadded export, which
// cannot mask padding, refuses --seq-min-len (it would be ignored) and trains at 128. Two
// tests, so that ctest runs the two bert-base trainings side by side; one step for the second.
json train_graph_on_short_batches(const char* file, int steps) {
  return run_json("train --model graph:" + kGraphs + file +
                  " --dataset synthetic-seq --seq-len 128 --seq-min-len 40 --batch 2 --steps " + std::to_string(steps) +
                  " --synthetic-size 4 --eval-batches 0 --quiet");
}

TEST(GraphImportZoo, BertPaddedGraphTrainsOnPaddedBatches) {
  json j = train_graph_on_short_batches("bert_padded.json", 2);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["config"]["seq_min_len"], 40);
  EXPECT_EQ(j["metrics"]["history"]["train_loss"].size(), 2u);
  for (const json& loss : j["metrics"]["history"]["train_loss"]) EXPECT_TRUE(std::isfinite(loss.get<double>()));
}

TEST(GraphImportZoo, BertUnpaddedGraphRefusesSeqMinLenAndTrainsAtItsLength) {
  const CliRun r = run_oomlab("train --model graph:" + kGraphs + "bert.json --dataset synthetic-seq --seq-len 128 "
                              "--seq-min-len 40 --batch 2 --steps 1 --synthetic-size 4 --eval-batches 0 --quiet");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--seq-min-len applies to models that mask padded tokens"), std::string::npos) << r.output;
  json j = run_json("train --model graph:" + kGraphs + "bert.json --dataset synthetic-seq --seq-len 128 --batch 2 "
                    "--steps 1 --synthetic-size 4 --eval-batches 0 --quiet");
  ASSERT_TRUE(j.is_object());
  EXPECT_TRUE(std::isfinite(j["metrics"]["history"]["train_loss"].back().get<double>()));
}

// A graph plans its own checkpoint segments (CheckpointPlanner): train's results record how
// many it runs with, as for the zoo (BERT's 12 layers under sqrt: 3 segments of 4, the last
// not checkpointed), not 0.
TEST(GraphImportZoo, TrainRecordsAGraphsCheckpointSegments) {
  json j = run_json(
      "train --model graph:" + kGraphs +
      "bert_padded.json --checkpoint sqrt --device meta"
      " --dataset synthetic-seq --seq-len 128 --batch 2 --steps 1 --synthetic-size 4 --eval-batches 0 --quiet");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["config"]["checkpoint_segments"], 2);
}

// Any other use of the attention-mask input is refused naming the node: here attention reads
// the [B, T] mask itself instead of the [B, 1, T, T] one built from it.
TEST(GraphImportZoo, OtherUsesOfTheMaskInputAreRefusedNamingTheNode) {
  ModelGraph g = read_model_graph(kGraphs + "bert_padded.json");
  for (GraphNode& n : g.nodes)
    if (n.op == "aten.scaled_dot_product_attention.default") {
      n.args[3] = json{{"ref", "_to_copy"}};
      n.refs[3] = "_to_copy";
    }
  ModelConfig cfg = bert_base_config();
  cfg.device = meta_device();
  nn::ModulePtr m = build_graph_model(g, cfg);
  try {
    (void)(*m)(Tensor::empty({2, 128}, DType::i64, meta_device()));
    ADD_FAILURE() << "no error";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("node 'scaled_dot_product_attention' "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("key padding"), std::string::npos) << e.what();
  }
}

// The exact memory of a training step equals the zoo bert-base's without dropout (the eval
// export has none): activations, parameters, gradients, optimizer state and transients to the
// byte, in both attention modes; the graph adds Hugging Face's position_ids and token_type_ids
// buffers (2 x 512 int64, 8192 bytes; non-persistent: on the device, outside the state_dict). The peak is the zoo's
// plus those buffers where the activations make it (batch 24, 32); with fused attention less the zoo's key padding mask
// (B x T bytes; the graph masks nothing). At batch 8 and 16 the peak falls in layer 11's
// backward, where the optimizer-state blocks count: the caching allocator, like PyTorch's,
// counts a reused large block whole when its remainder (under 1 MiB) is not split, and the
// graph's other allocation order (the id buffers, the constants) reuses other blocks; the
// peaks then differ by those remainders (batch 8: +1,056,768 bytes = 8192 + 1 MiB of
// remainders, the live "weight/optim" blocks at the peak; batch 16: -778,240).
TEST(GraphImportZoo, BertBaseStepMemoryIsTheZoosPlusItsIdBuffers) {
  const std::string graph = "graph:" + kGraphs + "bert.json";
  for (const char* attention : {"eager", "fused"}) {
    for (int batch : {24, 32}) {
      const std::string flags = " --batch " + std::to_string(batch) + " --attention " + attention;
      json zoo = run_json("estimate --model bert-base --classes 2 --dropout 0" + flags)["metrics"]["exact"];
      json imp = run_json("estimate --model " + graph + flags)["metrics"]["exact"];
      ASSERT_TRUE(zoo.is_object() && imp.is_object());
      // HF's id buffers are non-persistent (outside the state_dict, so not counted as buffers),
      // but they live on the device: in the peak
      EXPECT_EQ(imp["buffers_bytes"], zoo["buffers_bytes"]);
      const int64_t mask = std::string(attention) == "fused" ? int64_t(batch) * 128 : 0;
      EXPECT_EQ(imp["activation_bytes"].get<int64_t>() - zoo["activation_bytes"].get<int64_t>(), -mask) << flags;
      EXPECT_EQ(imp["peak_allocated_bytes"].get<int64_t>() - zoo["peak_allocated_bytes"].get<int64_t>(), 8192 - mask)
          << flags;
      for (const char* k : {"params_bytes", "grads_bytes", "optimizer_state_bytes", "transient_bytes", "input_bytes"})
        EXPECT_EQ(imp[k], zoo[k]) << k << flags;
    }
  }
}

TEST(GraphImportZoo, BertGraphTrainsAtItsExportedLength) {
  const std::string graph = "graph:" + kGraphs + "bert.json";
  CliRun r = run_oomlab("train --model " + graph + " --dataset synthetic-seq --seq-len 64 --batch 1 --steps 1");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("was exported for 128-token sequences: train it with --seq-len 128"), std::string::npos)
      << r.output;
  r = run_oomlab("train --model " + graph +
                 " --dataset synthetic-seq --seq-len 128 --batch 1 --steps 1 --synthetic-size 2 --eval-batches 0");
  EXPECT_EQ(r.code, 0) << r.output;
}

// Hugging Face's GPT-2 (GPT2LMHeadModel, eval export): 124,439,808 parameters with lm_head tied
// to the token embedding (written once), and a causal model: its folded mask runs as causal
// attention, so changing the last token leaves every earlier position's logits unchanged, bit
// for bit (eager and fused), while the last position's change.
TEST(GraphImportZoo, Gpt2IsTiedAndCausal) {
  for (bool fused : {false, true}) {
    ModelConfig cfg;
    cfg.seq_len = 128;
    cfg.fused_attention = fused;
    nn::ModulePtr m = build_graph_model(read_model_graph(kGraphs + "gpt2.json"), cfg);
    EXPECT_EQ(m->num_parameters(), 124439808);
    m->eval();
    Generator gen{3, 0};
    std::vector<int64_t> ids(128);
    for (int64_t& id : ids) id = int64_t(gen.next_below(50257));
    const Tensor a = (*m)(Tensor::from_vector_i64(ids, {1, 128}));
    ids.back() = (ids.back() + 1) % 50257;
    const Tensor b = (*m)(Tensor::from_vector_i64(ids, {1, 128}));
    ASSERT_EQ(a.shape(), (Shape{1, 128, 50257}));
    EXPECT_EQ(tensor_bytes(a.narrow(1, 0, 127).contiguous()), tensor_bytes(b.narrow(1, 0, 127).contiguous())) << fused;
    EXPECT_NE(tensor_bytes(a.narrow(1, 127, 1).contiguous()), tensor_bytes(b.narrow(1, 127, 1).contiguous())) << fused;
  }
}
}  // namespace
