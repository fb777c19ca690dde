// test_experiment_runner.cpp — `oomlab run` on the meta-device experiments (01, 02, 04):
// results are written where asked, carry the schema's blocks, and the verdicts follow
// from the measured points; bad experiment folders fail with a clear message and write
// nothing. (03 trains for minutes; its trainer is covered by test_train_resume/test_data.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/train/experiment_runner.h"

using namespace oomlab;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
struct TempDir {
  std::string path;
  TempDir() {
    path = (fs::temp_directory_path() / "oomlab_runner_XXXXXX").string();
    if (!::mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed");
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string experiment(const std::string& name) { return std::string(OOMLAB_SOURCE_DIR) + "/experiments/" + name; }

json run_to(const TempDir& t, const std::string& name, const std::string& profile = "quick") {
  const std::string out = t.path + "/" + name + ".json";
  EXPECT_EQ(run_experiment(experiment(name), profile, out), out);
  return json::parse(std::ifstream(out));
}

void expect_schema(const json& r, const std::string& name) {
  EXPECT_EQ(r["schema_version"], 1);
  EXPECT_EQ(r["experiment"], name);
  for (const char* k : {"context", "config", "source", "points", "summary", "verdict"}) EXPECT_TRUE(r.contains(k)) << k;
  EXPECT_FALSE(r["points"].empty());
  const std::string status = r["verdict"]["status"];
  EXPECT_TRUE(status == "confirmed" || status == "refuted" || status == "depends") << status;
  EXPECT_FALSE(r["verdict"]["reason"].get<std::string>().empty());
}
}  // namespace

TEST(ExperimentRunner, TransformerActivationMemoryMatchesFp32Formula) {
  TempDir t;
  json r = run_to(t, "04_transformer_activation_memory");
  expect_schema(r, "04_transformer_activation_memory");
  ASSERT_EQ(r["points"].size(), 2u * 4u);   // bert-base, bert-mini x quick seq_lens
  double prev_share = 0;
  std::string prev_model;
  for (const auto& p : r["points"]) {
    const auto& m = p["metrics"];
    const int64_t s = m["seq"], b = m["batch"], h = m["hidden"], a = m["heads"];
    // The measured bytes are the fp32 formula plus layer_norm's mean/rstd, exactly.
    EXPECT_EQ(m["saved_bytes_per_layer"].get<int64_t>(), s * b * h * 66 + 9 * a * s * s * b + 16 * s * b)
        << p["name"];
    EXPECT_EQ(m["korthikanti_fp16_bytes"].get<int64_t>(), s * b * h * 34 + 5 * a * s * s * b);
    // The attention (s^2) share grows with the sequence length.
    const std::string model = p["config"]["model"];
    if (model == prev_model) {
      EXPECT_GT(m["seq_squared_share"].get<double>(), prev_share) << p["name"];
    }
    prev_model = model;
    prev_share = m["seq_squared_share"];
    EXPECT_GT(m["training_peak_bytes"].get<int64_t>(), m["all_layers_saved_bytes"].get<int64_t>());
  }
  EXPECT_EQ(r["verdict"]["status"], "confirmed");
  EXPECT_LT(r["summary"]["max_rel_error_vs_fp32_formula"].get<double>(), 0.01);
}

TEST(ExperimentRunner, MemoryVsBatchFitsAreLinear) {
  TempDir t;
  json r = run_to(t, "02_memory_vs_batch");
  expect_schema(r, "02_memory_vs_batch");
  ASSERT_FALSE(r["summary"]["fits"].empty());
  for (const auto& f : r["summary"]["fits"]) {
    EXPECT_GT(f["r2"].get<double>(), 0.999) << f.dump();
    EXPECT_GT(f["per_sample_bytes"].get<double>(), 0) << f.dump();
  }
}

TEST(ExperimentRunner, VggTableHasTheSourceParameterCount) {
  TempDir t;
  json r = run_to(t, "01_vgg16_memory");
  expect_schema(r, "01_vgg16_memory");
  EXPECT_EQ(r["summary"]["totals"]["params"], 138357544);
}

TEST(ExperimentRunner, BadFoldersFailClearlyAndWriteNothing) {
  TempDir t;
  const std::string out = t.path + "/out.json";
  try {
    run_experiment(t.path + "/no_such_experiment", "quick", out);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("experiment.json"), std::string::npos) << e.what();
  }
  fs::create_directories(t.path + "/99_unknown");
  std::ofstream(t.path + "/99_unknown/experiment.json") << R"({"name": "99_unknown"})";
  try {
    run_experiment(t.path + "/99_unknown", "quick", out);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("04_transformer_activation_memory"), std::string::npos) << e.what();
  }
  fs::create_directories(t.path + "/04_bad");
  std::ofstream(t.path + "/04_bad/experiment.json")
      << R"({"name": "04_transformer_activation_memory", "models": ["bert-mini"], "seq_lens": {"full": [64]}})";
  try {
    run_experiment(t.path + "/04_bad", "quick", out);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("seq_lens.quick"), std::string::npos) << e.what();
  }
  std::ofstream(t.path + "/04_bad/experiment.json")
      << R"({"name": "04_transformer_activation_memory", "models": ["resnet20"], "seq_lens": {"quick": [64]}})";
  EXPECT_THROW(run_experiment(t.path + "/04_bad", "quick", out), ValueError);
  std::ofstream(t.path + "/04_bad/experiment.json") << "{ not json";
  EXPECT_THROW(run_experiment(t.path + "/04_bad", "quick", out), IoError);
  EXPECT_FALSE(fs::exists(out));
}
