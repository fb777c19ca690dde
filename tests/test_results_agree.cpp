// test_results_agree.cpp — every command's JSON reports the figure its printed table
// reports, under the key that names it, for every zoo model: `summary` (parameters, the
// forward-only and training-forward peaks), `estimate` (the exact peak; the `memory` block's
// allocator peak is the estimate's own, metrics.exact.peak_allocated_bytes), and `train`
// (each epoch's line against history.epochs). `memory.of` says which run the stats cover.
// ctest tier: cli
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/cli/cli_args.h"
#include "tests/cli_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {
fs::path tmp(const std::string& name) {
  return fs::temp_directory_path() / ("oomlab_agree_" + name + "_" + std::to_string(::getpid()) + ".json");
}

std::vector<std::string> zoo() {
  std::vector<std::string> names;
  std::istringstream in(run_oomlab("models").output);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) names.push_back(line);
  return names;
}

json run_json(const std::string& args, std::string* printed) {
  const fs::path out = tmp("run");
  const CliRun r = run_oomlab(args + " --json " + out.string());
  EXPECT_EQ(r.code, 0) << args << "\n" << r.output;
  *printed = r.output;
  std::ifstream f(out);
  json j = json::parse(f, nullptr, /*allow_exceptions=*/false);
  fs::remove(out);
  return j;
}

int64_t peak_of(const json& j) { return j["memory"]["totals"]["allocated_bytes.all.peak"].get<int64_t>(); }
}  // namespace

TEST(ResultsAgree, SummaryAndEstimateOfEveryZooModel) {
  const std::vector<std::string> models = zoo();
  ASSERT_GE(models.size(), 10u);
  for (const std::string& m : models) {
    SCOPED_TRACE(m);
    std::string text;
    const json s = run_json("summary --model " + m + " --batch 2", &text);
    ASSERT_TRUE(s.is_object()) << text;
    const json& t = s["metrics"]["totals"];
    EXPECT_NE(text.find(oomlab::str_cat("total params ", t["params"].get<int64_t>(), ";")), std::string::npos) << text;
    EXPECT_NE(text.find("forward-only peak " + oomlab::format_bytes(t["forward_only_peak_bytes"].get<double>())),
              std::string::npos) << text;
    EXPECT_NE(
        text.find("training-forward peak " + oomlab::format_bytes(t["training_forward_peak_bytes"].get<double>())),
        std::string::npos)
        << text;
    EXPECT_EQ(peak_of(s), t["training_forward_peak_bytes"].get<int64_t>());
    EXPECT_NE(s["memory"]["of"].get<std::string>().find("training forward"), std::string::npos);

    const json e = run_json("estimate --model " + m + " --batch 2", &text);
    ASSERT_TRUE(e.is_object()) << text;
    const int64_t exact = e["metrics"]["exact"]["peak_allocated_bytes"].get<int64_t>();
    EXPECT_EQ(peak_of(e), exact) << "the memory block's peak is the estimate's own";
    EXPECT_NE(text.find("PEAK allocated"), std::string::npos) << text;
    const std::string peak_row = text.substr(text.find("PEAK allocated"));
    EXPECT_NE(peak_row.find(oomlab::format_bytes(double(exact))), std::string::npos) << peak_row;
    EXPECT_EQ(e["memory"]["totals"]["reserved_bytes.all.peak"].get<int64_t>(),
              e["metrics"]["exact"]["peak_reserved_bytes"].get<int64_t>());
  }
}

TEST(ResultsAgree, TrainEpochLinesMatchHistory) {
  std::string text;
  const json j = run_json("train --model mlp --dataset synthetic --synthetic-size 64 --batch 16 --epochs 2 "
                          "--eval-batches 1",
                          &text);
  ASSERT_TRUE(j.is_object()) << text;
  const json& epochs = j["metrics"]["history"]["epochs"];
  ASSERT_EQ(epochs.size(), 2u);
  for (const json& e : epochs) {
    char line[256];
    std::snprintf(line, sizeof line, "epoch %lld step %lld: train loss %.4f acc %.4f | test loss %.4f acc %.4f",
                  (long long)e["epoch"].get<int64_t>(), (long long)e["step"].get<int64_t>(),
                  e["train_loss"].get<double>(), e["train_accuracy"].get<double>(), e["test_loss"].get<double>(),
                  e["test_accuracy"].get<double>());
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  EXPECT_EQ(j["memory"]["of"], "the whole run");
}

// A figure that was not measured is null in the JSON and "n/a" in the line, never 0: no
// evaluation (--eval-batches 0), and the meta device (no values at all).
TEST(ResultsAgree, UnmeasuredFiguresAreNullNotZero) {
  std::string text;
  const json none = run_json("train --model mlp --dataset synthetic --synthetic-size 32 --batch 16 --steps 2 "
                             "--eval-batches 0", &text);
  ASSERT_TRUE(none.is_object()) << text;
  const json& e = none["metrics"]["history"]["epochs"].back();
  EXPECT_TRUE(e["test_loss"].is_null() && e["test_accuracy"].is_null()) << e;
  EXPECT_EQ(e["test_samples"], 0);
  EXPECT_TRUE(e["train_loss"].is_number()) << e;
  EXPECT_TRUE(none["metrics"]["final_test_accuracy"].is_null());
  EXPECT_NE(text.find("| test loss n/a acc n/a"), std::string::npos) << text;
  const json meta = run_json("train --model mlp --dataset synthetic --synthetic-size 32 --batch 16 --steps 2 "
                             "--device meta", &text);
  ASSERT_TRUE(meta.is_object()) << text;
  for (const json& l : meta["metrics"]["history"]["train_loss"]) EXPECT_TRUE(l.is_null()) << l;
  for (const char* k : {"train_loss", "train_accuracy", "test_loss", "test_accuracy"})
    EXPECT_TRUE(meta["metrics"]["history"]["epochs"].back()[k].is_null()) << k;
  EXPECT_NE(text.find("train loss n/a acc n/a | test loss n/a acc n/a"), std::string::npos) << text;
}
