// test_graph_hostile.cpp — values from a hostile graph file (models/graph_internal.h,
// graph_args.cpp): dims, indices, sizes and constants out of range, integer arithmetic that
// overflows or divides by zero, a getitem past what oomlab computes, a 1-D embedding table.
// Each is one oomlab::Error (never an InternalError, a signal or a corrupted heap) whose
// message names the file, the node and the argument; on the seed graphs of the fuzz corpus
// in-process (build + a meta forward and backward), and the reproducer through the
// CLI (exit 2, one line).
// ctest tier: models cli
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/ops/elementwise.h"
#include "models/graph_model.h"
#include "tests/cli_test_util.h"

using namespace oomlab;
using json = nlohmann::json;

namespace {
const std::string kCorpus = std::string(OOMLAB_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_model_graph/";

json seed(const std::string& name) { return json::parse(read_file(kCorpus + name + ".json")); }

json& node(json& g, const std::string& name) {
  for (json& n : g["nodes"])
    if (n["name"] == name) return n;
  throw std::runtime_error("no node " + name);
}

json& parameter(json& g, const std::string& name) {
  for (json& p : g["parameters"])
    if (p["name"] == name) return p;
  throw std::runtime_error("no parameter " + name);
}

// tiny_gpt2_dynamic with one more size node, folded at build time: `a op b`.
json with_size_arith(const char* op, json a, json b) {
  json g = seed("tiny_gpt2_dynamic");
  json n = {{"name", "hostile_size"},
            {"op", op},
            {"args", {a, b}},
            {"outputs", {{{"shape", json::array()}, {"dtype", "int64"}}}}};
  g["nodes"].insert(g["nodes"].begin() + 1, n);
  return g;
}

struct Case {
  const char* name;
  std::function<json()> graph;
  Shape input;
  std::string want;   // "node 'n' (op) | what": the error starts "graph g.json: node 'n' (op)" (then the
                      // node's module, where the file names one) and goes on with what
};

// The graph built and run forward and backward on meta: the error it must end in.
std::string error_of(const json& g, const Shape& input) {
  try {
    ModelConfig cfg;
    cfg.device = meta_device();
    nn::ModulePtr m = build_graph_model(parse_model_graph(g.dump(), "g.json"), cfg);
    const bool tokens = input.size() == 2;
    Tensor y = (*m)(tokens ? Tensor::zeros(input, DType::i64, meta_device())
                           : Tensor::zeros(input, DType::f32, meta_device()));
    sum_all(y).backward();
    return "(no error)";
  } catch (const InternalError& e) {
    return std::string("internal error: ") + e.what();
  } catch (const Error& e) {
    return e.what();
  }
}

const Case kCases[] = {
    {"unsqueeze dim",
     [] {
       json g = seed("bert_attention");
       node(g, "unsqueeze_7")["args"][1] = 7;
       return g;
     },
     {2, 128},
     "node 'unsqueeze_7' (aten.unsqueeze.default) | argument 1: dim 7 is out of range for a 2-D value"},
    {"unsqueeze dim INT64_MIN",
     [] {
       json g = seed("bert_attention");
       node(g, "unsqueeze_6")["args"][1] = INT64_MIN;
       return g;
     },
     {2, 128},
     "node 'unsqueeze_6' (aten.unsqueeze.default) | argument 1: dim -9223372036854775808 is out of range"},
    {"gather dim",
     [] {
       json g = seed("bert_attention");
       node(g, "gather")["args"][1] = -9;
       return g;
     },
     {2, 128},
     "node 'gather' (aten.gather.default) | argument 1: dim -9 is out of range for a 2-D value"},
    {"gather index",
     [] {
       json g = seed("bert_attention");
       parameter(g, "bert.embeddings.position_ids")["values"][5] = 600;
       return g;
     },
     {2, 128},
     "node 'gather' (aten.gather.default) | argument 2: index 600 is out of range for dim 1 of size 512"},
    {"constant id past its table",
     [] {
       json g = seed("bert_attention");
       for (json& v : parameter(g, "bert.embeddings.token_type_ids")["values"]) v = 5;
       return g;
     },
     {2, 128},
     "node 'embedding_1' (aten.embedding.default) | argument 1: constant id 5 is out of range for an embedding of 2 "
     "rows"},
    {"expand to a negative size",
     [] {
       json g = seed("bert_attention");
       node(g, "expand")["args"][1] = {-5, -1};
       return g;
     },
     {2, 128},
     "node 'expand' (aten.expand.default) | argument 1: expand of [1, 512] to [-5, -1]"},
    {"floordiv overflow",
     [] { return with_size_arith("_operator.floordiv", INT64_MIN, -1); },
     {2, 16},
     "node 'hostile_size' (_operator.floordiv) | argument 1: -9223372036854775808 // -1 overflows a 64-bit integer"},
    {"floordiv by zero",
     [] { return with_size_arith("_operator.floordiv", 7, 0); },
     {2, 16},
     "node 'hostile_size' (_operator.floordiv) | argument 1: 7 // 0 divides by zero"},
    {"mul overflow",
     [] {
       return with_size_arith("_operator.mul", json{{"ref", "sym_size_int_4"}}, INT64_MAX);
     },
     {2, 16},
     "node 'hostile_size' (_operator.mul) | argument 1: 2 * 9223372036854775807 overflows a 64-bit integer"},
    {"cat dim",
     [] {
       json g = seed("tiny_gpt2_dynamic");
       node(g, "cat")["args"][1] = 3;
       return g;
     },
     {2, 16},
     "node 'cat' (aten.cat.default) | argument 1: dim 3 is out of range for a 2-D value"},
    {"slice step 0",
     [] {
       json g = seed("tiny_gpt2_dynamic");
       node(g, "slice_2")["args"][4] = 0;
       return g;
     },
     {2, 16},
     "node 'slice_2' (aten.slice.Tensor) | argument 4: slice step 0 (must be positive)"},
    {"cumsum dim",
     [] {
       json g = seed("tiny_gpt2_dynamic");
       node(g, "cumsum")["args"][1] = 2;
       return g;
     },
     {2, 16},
     "node 'cumsum' (aten.cumsum.default) | argument 1: dim 2 is out of range for a 2-D value"},
    {"split dim",
     [] {
       json g = seed("tiny_gpt2_dynamic");
       node(g, "split_with_sizes")["args"][2] = -4;
       return g;
     },
     {2, 16},
     "node 'split_with_sizes' (aten.split_with_sizes.default) | argument 2: dim -4 is out of range for a 3-D value"},
    {"view of an invalid shape",
     [] {
       json g = seed("tiny_gpt2_dynamic");
       node(g, "view_3")["args"][1][3] = 15;
       return g;
     },
     {2, 16},
     "node 'view_3' (aten.view.default) | reshape: shape [2, 16, -1, 15] is invalid for input of shape [2, 16, 32]"},
    {"getitem past oomlab's outputs",
     [] {
       json g = seed("small_cnn");
       node(g, "max_pool")["outputs"].push_back({{"shape", {2, 4, 4, 4}}, {"dtype", "int64"}});
       node(g, "getitem_1")["args"][1] = 2;
       return g;
     },
     {2, 3, 8, 8},
     "node 'getitem_1' (getitem) | argument 1: output 2 of 'max_pool', which has 2 output(s) in oomlab"},
    {"conv stride 0",
     [] {
       json g = seed("small_cnn");
       node(g, "convolution")["args"][3] = {0, 1};
       return g;
     },
     {2, 3, 8, 8},
     "node 'convolution' (aten.convolution.default) | conv2d: invalid parameters stride (0, 1)"},
    {"1-D embedding weight",
     [] {
       json g = seed("tiny_gpt2_dynamic");
       parameter(g, "transformer.wpe.weight")["shape"] = {512};
       return g;
     },
     {2, 16},
     "node 'embedding_1' (aten.embedding.default) | embedding: weight must be 2-D"},
    {"an unsigned 2^64 - 1",
     [] {
       json g = seed("bert_attention");
       node(g, "unsqueeze_7")["args"][1] = UINT64_MAX;
       return g;
     },
     {2, 128},
     "node 'unsqueeze_7' (aten.unsqueeze.default) | argument 1: 18446744073709551615 where an integer was expected"},
    {"sym_size of dim 2^64 - 1 (not dim -1)",
     [] {
       json g = seed("tiny_gpt2_dynamic");
       node(g, "sym_size_int_4")["args"][1] = UINT64_MAX;
       return g;
     },
     {2, 16},
     "node 'sym_size_int_4' (aten.sym_size.int) | argument 1: 18446744073709551615 where an integer was expected"},
};

class GraphHostile : public ::testing::TestWithParam<Case> {};

TEST_P(GraphHostile, IsOneErrorNamingFileNodeAndArgument) {
  const Case& c = GetParam();
  const std::string msg = error_of(c.graph(), c.input);
  const size_t bar = c.want.find(" | ");
  EXPECT_EQ(msg.rfind("graph g.json: " + c.want.substr(0, bar), 0), 0u) << c.name << ": " << msg;
  EXPECT_NE(msg.find("): " + c.want.substr(bar + 3)), std::string::npos) << c.name << ": " << msg;
}

INSTANTIATE_TEST_SUITE_P(Values, GraphHostile, ::testing::ValuesIn(kCases), [](const auto& info) {
  std::string n = info.param.name;
  for (char& ch : n) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
});

// The unmutated seeds still build and run (the checks refuse only what is out of range).
TEST(GraphHostile, TheSeedsThemselvesRun) {
  EXPECT_EQ(error_of(seed("bert_attention"), {2, 128}), "(no error)");
  EXPECT_EQ(error_of(seed("tiny_gpt2_dynamic"), {3, 16}), "(no error)");
  EXPECT_EQ(error_of(seed("small_cnn"), {2, 3, 8, 8}), "(no error)");
}

// The reproducer: the first aten.select.int of the shipped BERT with dim 5 corrupted
// the heap (exit 134); now `oomlab summary` and `oomlab estimate` exit 2 with one line.
TEST(GraphHostileCli, ShippedBertWithASelectDimOutOfRange) {
  json g = json::parse(read_file(std::string(OOMLAB_SOURCE_DIR) + "/models/graphs/bert.json"));
  for (json& n : g["nodes"])
    if (n["op"] == "aten.select.int") { n["args"][1] = 5; break; }
  const std::string path =
      (std::filesystem::temp_directory_path() / ("oomlab_hostile_" + std::to_string(::getpid()) + ".json")).string();
  std::ofstream(path) << g.dump();
  for (const char* cmd : {"summary --batch 1", "estimate --batch 2"}) {
    const CliRun r = run_oomlab(std::string(cmd) + " --model graph:" + path);
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.output;
    EXPECT_EQ(r.output,
              "oomlab: error: graph " + path +
                  ": node 'select' (aten.select.int) in module 'bert.pooler' "
                  "(BertPooler): argument 1: dim 5 is out of range for a 3-D value (expected -3 <= dim < 3)\n")
        << cmd;
  }
  std::filesystem::remove(path);
}
}  // namespace
