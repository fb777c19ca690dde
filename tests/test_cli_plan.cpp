// test_cli_plan.cpp — `oomlab plan` and `oomlab estimate --gpu` from the command line: the
// issue 52 bar's commands (bert-base s512 on an RTX 4090 within 24 GB with the reserve,
// gpt2's import on a T4, 8 x A100 80GB), one exit-2 line for an unknown card or an impossible
// request, --batch (per card, never accumulated), --verify cpu training the recommendation
// with the meta peak equal to the measured one, --verify cuda without a GPU refused before
// the search, and estimate --gpu's prediction.
// ctest tier: cli
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "temp_dir_util.h"

namespace {
nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

void expect_one_exit2_line(const CliRun& r, const std::string& words) {
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(words), std::string::npos) << r.output;
}
}  // namespace

TEST(CliPlan, TheIssuesBarCommands) {
  TempDir d("cli_plan");
  const CliRun bert = run_oomlab("plan --model bert-base --seq-len 512 --gpu rtx4090 --global-batch 256 --json " +
                                 d.file("p.json"));
  ASSERT_EQ(bert.code, 0) << bert.output;
  const nlohmann::json p = read_json(d.file("p.json"));
  const nlohmann::json& m = p["metrics"];
  ASSERT_TRUE(m.contains("recommended"));
  const nlohmann::json& c = m["candidates"][m["recommended"]["candidate"].get<size_t>()];
  EXPECT_LE(c["peak_reserved_bytes"].get<int64_t>() + p["config"]["reserve_bytes"].get<int64_t>(),
            int64_t(24) << 30);
  EXPECT_GT(c["predicted_ms"].get<double>(), 0);
  EXPECT_TRUE(c["unseen_features"].empty()) << c.dump();
  EXPECT_FALSE(m["technique_reasons"].empty());
  EXPECT_NE(bert.output.find("recommended: oomlab train"), std::string::npos);
  EXPECT_EQ(run_oomlab("plan --model graph:" + std::string(OOMLAB_SOURCE_DIR) +
                       "/models/graphs/gpt2.json --gpu t4 --global-batch 16").code, 0);
  EXPECT_EQ(run_oomlab("plan --model resnet50 --gpus 8 --gpu a100-80gb --global-batch 512").code, 0);
}

// --batch B: B samples per card per step, no accumulation; with --gpus N the global batch is N B.
TEST(CliPlan, BatchPerCardIsNeverAccumulated) {
  TempDir d("cli_plan_batch");
  const CliRun r = run_oomlab("plan --model resnet50 --gpu t4 --gpus 2 --batch 48 --json " + d.file("p.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("global batch 96 (no accumulation)"), std::string::npos) << r.output;
  const nlohmann::json p = read_json(d.file("p.json"));
  EXPECT_EQ(p["config"]["global_batch"], 96);
  EXPECT_EQ(p["config"]["accumulation_searched"], false);
  int fitting = 0;
  for (const nlohmann::json& c : p["metrics"]["candidates"]) {
    if (!c["fits"].get<bool>()) continue;
    ++fitting;
    EXPECT_EQ(c["accumulate"], 1) << c.dump();
    EXPECT_EQ(c["micro_batch"], 48) << c.dump();   // per rank; DataParallel's: per device
  }
  EXPECT_GT(fitting, 0);
}

// DataParallel is one process over one machine's cards: past 16 it is not searched, and the
// plan says so (a 64-card bert-base plan spent 66 of its 79 s on DataParallel's meta steps).
TEST(CliPlan, DataParallelIsSearchedOnOneMachinesCardsOnly) {
  TempDir d("cli_plan_dp");
  for (const int gpus : {8, 32}) {
    const CliRun r = run_oomlab("plan --model resnet20 --gpu t4 --gpus " + std::to_string(gpus) +
                                " --global-batch 256 --json " + d.file("p.json"));
    ASSERT_EQ(r.code, 0) << r.output;
    const nlohmann::json p = read_json(d.file("p.json"));
    int dp = 0;
    for (const auto& c : p["metrics"]["candidates"]) dp += c["parallel"] == "dp" || c["parallel"] == "bdp";
    EXPECT_EQ(dp > 0, gpus == 8) << gpus << " cards: " << dp << " DataParallel candidates";
    EXPECT_EQ(p["config"]["data_parallel_searched"], gpus == 8);
    EXPECT_EQ(r.output.find("DataParallel: not searched past 16 cards") != std::string::npos, gpus == 32) << r.output;
  }
}

TEST(CliPlan, BadRequestsAreOneExitTwoLine) {
  expect_one_exit2_line(run_oomlab("plan --model resnet50 --gpu h999 --global-batch 64"), "h999");
  expect_one_exit2_line(run_oomlab("plan --model bert-large --gpu t4 --global-batch 64"), "bert-large");
  expect_one_exit2_line(run_oomlab("plan --model resnet50 --device-memory 1MiB --global-batch 64"), "nothing fits");
  expect_one_exit2_line(run_oomlab("plan --model resnet50 --gpu t4 --gpus 3 --global-batch 64"), "--gpus 3");
  expect_one_exit2_line(run_oomlab("plan --model resnet50 --gpu t4"), "--global-batch B");
  expect_one_exit2_line(run_oomlab("plan --model resnet50 --gpu t4 --batch 8 --global-batch 8"), "exclude");
  expect_one_exit2_line(run_oomlab("plan --model resnet50 --gpu t4 --batch 100000"), "at micro-batch 100000");
  expect_one_exit2_line(run_oomlab("plan --model resnet50 --gpu t4 --global-batch 64 --verify meta"), "--verify");
  expect_one_exit2_line(run_oomlab("plan --model resnet50 --gpu t4 --global-batch 64 --verify gpu0"), "gpu0");
  // past 2^40 samples: refused by the flag (was: minutes listing the divisors of 2^63 - 1, or
  // --batch x --gpus wrapping to a negative "--global-batch")
  expect_one_exit2_line(run_oomlab("plan --model mlp --gpu t4 --global-batch 9223372036854775807"),
                        "--global-batch must be in 1..1099511627776");
  expect_one_exit2_line(run_oomlab("plan --model mlp --gpu t4 --batch 9223372036854775807 --gpus 2"),
                        "--batch must be in 1..1099511627776");
  // every candidate refused before its meta step: the reason, once (was: "needs -1 B")
  const CliRun seq = run_oomlab("plan --model bert-base --gpu h200 --seq-len 513 --batch 1");
  expect_one_exit2_line(seq, "no candidate can train bert-base as asked: --seq-len 513 exceeds max_positions 512");
  EXPECT_EQ(seq.output.find("-1 B"), std::string::npos) << seq.output;
}

TEST(CliPlan, VerifyOnTheCpuMeasuresThePeakMetaPredicted) {
  TempDir d("cli_plan_verify");
  const CliRun r = run_oomlab("plan --model tiny-ff --gpu h100-sxm --global-batch 16 --verify cpu --json " +
                              d.file("p.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("verify on cpu"), std::string::npos) << r.output;
  const nlohmann::json v = read_json(d.file("p.json"))["metrics"]["verify"];
  EXPECT_GT(v["measured_ms"].get<double>(), 0);
  EXPECT_EQ(v["measured_peak_reserved_bytes"], v["predicted_peak_reserved_bytes"]) << v.dump();
}

TEST(CliPlan, VerifyOnAMissingGpuIsRefusedBeforeTheSearch) {
  const CliRun r =
      run_oomlab("plan --model resnet50 --gpu t4 --global-batch 64 --verify cuda", "CUDA_VISIBLE_DEVICES=");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--verify cuda"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("candidates"), std::string::npos) << r.output;   // no search ran
}

TEST(CliPlan, EstimatePredictsTheStepTimeOnACard) {
  TempDir d("cli_estimate_gpu");
  const CliRun r = run_oomlab("estimate --model resnet20 --batch 8 --gpu h200 --allow-tf32 all --json " +
                              d.file("e.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json t = read_json(d.file("e.json"))["metrics"]["time_model"];
  EXPECT_EQ(t["gpu"], "h200");
  EXPECT_GT(t["features_ms"]["conv.tf32"].get<double>(), 0);
  EXPECT_GT(t["predicted_ms"].get<double>(), 0);
  expect_one_exit2_line(run_oomlab("estimate --model resnet20 --batch 8 --allow-tf32 all"), "--gpu");
}
