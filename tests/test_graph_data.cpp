// test_graph_data.cpp — imported graphs take the data their export implies and finish their
// runs: synthetic images follow a classifier's output classes (a 5-class export trains
// without --classes); synthetic token ids stay inside the graph's vocabulary; a causal LM
// (GPT-2's layout) trains and is evaluated on next tokens, its accuracy counted over the
// B*(T-1) positions it scores; token graphs train and step on --dataset npy, and token files
// of another length than the export's are one clear error; an unsupported module (an
// exported nn.LSTM) is named with its type.
// ctest tier: models cli
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/io/atomic_file.h"
#include "tests/cli_test_util.h"
#include "tests/npy_test_util.h"

#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
const std::string kSeeds = std::string(OOMLAB_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_model_graph/";
const std::string kTinyGpt2 = kSeeds + "tiny_gpt2_dynamic.json";   // vocab 64, 16 tokens, [B, T, 64] logits

fs::path tmp(const std::string& name) {
  return fs::temp_directory_path() / ("oomlab_graph_data_" + name + "_" + std::to_string(::getpid()));
}

// small_cnn with a 5-class head: fc [5, 64], output [2, 5].
std::string five_class_graph(const fs::path& dir) {
  json g = json::parse(oomlab::read_file(kSeeds + "small_cnn.json"));
  for (json& p : g["parameters"]) {
    if (p["name"] == "fc.weight") p["shape"] = {5, 64};
    if (p["name"] == "fc.bias") p["shape"] = {5};
  }
  for (json& n : g["nodes"])
    if (n["name"] == "addmm") n["outputs"][0]["shape"] = {2, 5};
    else if (n["name"] == "permute") n["outputs"][0]["shape"] = {64, 5};
  const std::string path = (dir / "five.json").string();
  std::ofstream(path) << g.dump();
  return path;
}

TEST(GraphData, SyntheticImagesFollowTheGraphsClasses) {
  const fs::path dir = tmp("five");
  fs::create_directories(dir);
  const std::string graph = five_class_graph(dir), out = (dir / "r.json").string();
  const CliRun r = run_oomlab("train --model graph:" + graph + " --dataset synthetic --synthetic-size 16 --batch 4 "
                              "--steps 2 --quiet --json " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(json::parse(oomlab::read_file(out))["config"]["num_classes"], 5);
  fs::remove_all(dir);
}

TEST(GraphData, ACausalLmTrainsAndIsEvaluatedOnNextTokens) {
  const fs::path dir = tmp("lm");
  fs::create_directories(dir);
  const std::string out = (dir / "r.json").string();
  // synthetic ids below the graph's 64-row table (the dataset's own range is 1000)
  const CliRun r = run_oomlab("train --model graph:" + kTinyGpt2 + " --dataset synthetic-seq --seq-len 16 --batch 2 "
                              "--steps 2 --synthetic-size 4 --quiet --json " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const json epoch = json::parse(oomlab::read_file(out))["metrics"]["history"]["epochs"][0];
  ASSERT_TRUE(epoch["test_loss"].is_number()) << epoch.dump();
  EXPECT_GT(epoch["test_loss"].get<double>(), 0);
  // 2 steps x 2 samples x 15 scored positions: accuracy is a multiple of 1/60 in [0, 1]
  const double acc = epoch["train_accuracy"].get<double>();
  EXPECT_LE(acc, 1.0);
  EXPECT_NEAR(acc * 60, std::round(acc * 60), 1e-9) << acc;
  const double test_acc = epoch["test_accuracy"].get<double>();   // 2 test samples x 15 positions
  EXPECT_NEAR(test_acc * 30, std::round(test_acc * 30), 1e-9) << test_acc;
  fs::remove_all(dir);
}

TEST(GraphData, TokenGraphsTrainAndStepOnNpy) {
  const fs::path dir = tmp("npy");
  fs::create_directories(dir / "t16");
  fs::create_directories(dir / "t12");
  std::vector<int64_t> ids16(8 * 16), ids12(8 * 12), labels = {0, 1, 0, 1, 1, 0, 1, 0};
  for (size_t i = 0; i < ids16.size(); ++i) ids16[i] = 1 + int64_t(i * 7 % 60);
  for (size_t i = 0; i < ids12.size(); ++i) ids12[i] = 1 + int64_t(i * 5 % 60);
  npy_test::write_file((dir / "t16" / "train_inputs.npy").string(), npy_test::npy_of("<i8", "(8, 16)", ids16));
  npy_test::write_file((dir / "t16" / "train_labels.npy").string(), npy_test::npy_of("<i8", "(8,)", labels));
  npy_test::write_file((dir / "t12" / "train_inputs.npy").string(), npy_test::npy_of("<i8", "(8, 12)", ids12));
  npy_test::write_file((dir / "t12" / "train_labels.npy").string(), npy_test::npy_of("<i8", "(8,)", labels));
  const std::string model = "--model graph:" + kTinyGpt2;
  CliRun r = run_oomlab("train " + model + " --dataset npy --data-dir " + (dir / "t16").string() +
                        " --batch 2 --steps 2 --quiet --save " + (dir / "ck").string());
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_oomlab("step " + model + " --data-dir " + (dir / "t16").string() + " --init " +
                 (dir / "ck" / "step-2" / "model.safetensors").string() + " --out " +
                 (dir / "step.safetensors").string());
  EXPECT_EQ(r.code, 0) << r.output;
  r = run_oomlab("train " + model + " --dataset npy --data-dir " + (dir / "t12").string() +
                 " --batch 2 --steps 1 --quiet");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("was exported for 16-token sequences and npy:" + (dir / "t12").string() +
                          "[train] holds 12-token ones"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// An exported nn.LSTM: its nodes carry the module's path and type, and the error leads with them.
TEST(GraphData, AnUnsupportedModuleIsNamedWithItsType) {
  const fs::path dir = tmp("lstm");
  fs::create_directories(dir);
  json g = json::parse(oomlab::read_file(kSeeds + "small_cnn.json"));
  for (json& n : g["nodes"])
    if (n["name"] == "relu") { n["op"] = "aten.lstm.input"; n["module"] = "rnn"; n["module_type"] = "LSTM"; }
  const std::string path = (dir / "lstm.json").string();
  std::ofstream(path) << g.dump();
  const CliRun r = run_oomlab("summary --model graph:" + path);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("1 node(s) use ops oomlab does not have yet, in module(s) rnn (LSTM):\n  aten.lstm.input "
                          "(node 'relu', module 'rnn' (LSTM))"), std::string::npos) << r.output;
  fs::remove_all(dir);
}
}  // namespace
