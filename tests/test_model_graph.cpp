// test_model_graph.cpp — the model-graph file reader (engine/io/model_graph.h): the seed
// graph of the fuzz corpus (a small CNN in the layout scripts/export_model.py writes) reads
// back with its inputs, parameters (8 entries: 414 trainable elements, 9 buffer elements),
// nodes, module paths and references; every malformed, truncated or hostile variant is one
// IoError naming the file and the node or entry; a missing file is an IoError too.
// ctest tier: unit
#include <gtest/gtest.h>

#include <string>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/model_graph.h"

using namespace oomlab;
using json = nlohmann::json;

namespace {
const std::string kSeed = std::string(OOMLAB_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_model_graph/small_cnn.json";

json seed() { return json::parse(read_file(kSeed)); }

std::string error_of(const std::string& text) {
  try {
    parse_model_graph(text, "g.json");
  } catch (const IoError& e) {
    return e.what();
  }
  return "(no error)";
}
std::string error_of(const json& j) { return error_of(j.dump()); }

TEST(ModelGraph, TheSeedGraphReadsBack) {
  const ModelGraph g = read_model_graph(kSeed);
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.inputs[0].shape, (Shape{2, 3, 8, 8}));
  EXPECT_EQ(g.parameters.size(), 8u);
  EXPECT_EQ(g.parameter_count(), 4 * 27 + 4 + 4 + 640 + 10);
  EXPECT_EQ(g.buffer_count(), 4 + 4 + 1);
  ASSERT_EQ(g.nodes.size(), 9u);
  EXPECT_EQ(g.nodes[0].op, "aten.convolution.default");
  EXPECT_EQ(g.nodes[0].refs, (std::vector<std::string>{"x", "conv.weight"}));
  EXPECT_EQ(g.nodes[1].module, "bn");
  EXPECT_EQ(g.nodes[1].outputs.size(), 3u);
  EXPECT_EQ(g.nodes[2].refs, (std::vector<std::string>{"batch_norm"}));
  EXPECT_EQ(g.outputs, (std::vector<std::string>{"addmm"}));
}

TEST(ModelGraph, BadFilesAreIoErrorsNamingTheProblem) {
  auto expect = [](const std::string& err, const std::string& part) {
    EXPECT_NE(err.find("graph g.json"), std::string::npos) << err;
    EXPECT_NE(err.find(part), std::string::npos) << err;
  };
  const std::string text = seed().dump();
  expect(error_of(text.substr(0, text.size() / 2)), "not valid JSON");
  expect(error_of(std::string(100000, '[')), "nested deeper than 32");
  expect(error_of(json{{"version", 1}}), "not an oomlab graph");
  json j = seed();
  j["version"] = 2;
  expect(error_of(j), "version 2 is not supported (this oomlab reads version 1)");
  j = seed();
  j["nodes"][3]["args"][0]["ref"] = "nowhere";
  expect(error_of(j), "node 'relu' arg 0: 'nowhere' is not an input, a parameter or an earlier node");
  j = seed();
  j["nodes"][3]["args"][0]["ref"] = "addmm";   // defined later
  expect(error_of(j), "node 'relu' arg 0: 'addmm' is not");
  j = seed();
  j["nodes"][3]["args"][0]["ref"] = "batch_norm";   // three outputs
  expect(error_of(j), "'batch_norm' has 3 outputs: only a getitem node may take it");
  j = seed();
  j["nodes"][2]["args"][1] = 3;
  expect(error_of(j), "node 'getitem': getitem takes");
  j = seed();
  j["nodes"][4]["name"] = "relu";
  expect(error_of(j), "the name 'relu' is defined twice");
  j = seed();
  j["parameters"][0]["shape"] = {4, -3, 3, 3};
  expect(error_of(j), "parameter 0: shape [4,-3,3,3]: every size must be an integer");
  j["parameters"][0]["shape"] = {1 << 20, 1 << 20, 1 << 20};
  expect(error_of(j), "more than 2^48 elements");
  j = seed();
  j["parameters"][1]["kind"] = "weights";
  expect(error_of(j), "parameter 1: \"kind\" must be parameter or buffer");
  j = seed();
  j["inputs"][0]["dtype"] = "complex64";
  expect(error_of(j), "input 0: unknown dtype \"complex64\"");
  j = seed();
  j["nodes"][0]["args"][2] = {{"tensor", 1}};
  expect(error_of(j), "node 'convolution' arg 2: an argument must be");
  j = seed();
  j["nodes"][0]["args"][2] = {{"float", "-inf"}};   // JSON's missing non-finite numbers, spelt as objects
  EXPECT_EQ(parse_model_graph(j.dump(), "g.json").nodes[0].args[2]["float"], "-inf");
  j["nodes"][0]["args"][2] = {{"float", "-infinity"}};
  expect(error_of(j), "node 'convolution' arg 2: {\"float\": ...} must hold \"inf\", \"-inf\" or \"nan\"");
  j = seed();
  j["nodes"][0].erase("outputs");
  expect(error_of(j), "node 'convolution': missing \"outputs\"");
  j = seed();
  j["nodes"][3]["kwargs"] = {{"inplace", false}, {"other", {{"ref", "later"}}}};
  expect(error_of(j), "node 'relu' kwarg 'other': 'later' is not");
  j["nodes"][3]["kwargs"] = {{"inplace", false}};
  EXPECT_EQ(parse_model_graph(j.dump(), "g.json").nodes[3].kwargs["inplace"], false);
  j = seed();
  j["outputs"] = {{{"ref", "missing"}}};
  expect(error_of(j), "output 0: 'missing' is not");
  EXPECT_THROW(read_model_graph("/nonexistent/graph.json"), IoError);
}

// The optional fields of exports with a symbolic batch: "dynamic_batch", "modules" (module
// types by path) and a buffer's "persistent"; wrong types are errors naming the field.
TEST(ModelGraph, DynamicBatchModulesAndPersistence) {
  auto expect = [](const std::string& err, const std::string& part) {
    EXPECT_NE(err.find(part), std::string::npos) << err;
  };
  json j = seed();
  j["dynamic_batch"] = true;
  j["modules"] = {{"features", "Sequential"}, {"features.0", "Conv2d"}};
  j["parameters"][3]["persistent"] = false;   // bn.running_mean
  ASSERT_EQ(j["parameters"][3]["kind"], "buffer");
  const ModelGraph g = parse_model_graph(j.dump(), "g.json");
  EXPECT_TRUE(g.dynamic_batch);
  EXPECT_EQ(g.module_types.at("features"), "Sequential");
  EXPECT_FALSE(g.parameters[3].persistent);
  EXPECT_TRUE(g.parameters[4].persistent);
  j["dynamic_batch"] = "yes";
  expect(error_of(j), "\"dynamic_batch\" must be true or false");
  j["dynamic_batch"] = true;
  j["modules"] = {{"features", 3}};
  expect(error_of(j), "\"modules\": entry 'features' must map a path to a type name");
  j["modules"] = json::array();
  expect(error_of(j), "\"modules\" must be an object");
  j["modules"] = json::object();
  j["parameters"][0]["persistent"] = false;   // a parameter
  expect(error_of(j), "parameter 0: \"persistent\" must be true or false, on a buffer");
}
}  // namespace
