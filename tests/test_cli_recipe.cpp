// test_cli_recipe.cpp — the recipe elements of T10 (experiment 14_recipe): the source's
// LambdaLR lambda (lambda-warmup-cosine) against its formula, --lr-groups (each group's lr
// under the schedule), --ema's raw-weights accuracy beside the EMA's, --tta flip, the
// distributed evaluation's padding report, the bad inputs of the new flags, and --attention
// fused (issue 31) training as eager and saving less.
// ctest tier: unit cli
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>

#include "engine/core/error.h"
#include "engine/optim/lr_schedule.h"
#include "tests/cli_test_util.h"

namespace oomlab {
namespace {
using json = nlohmann::json;
namespace fs = std::filesystem;

double source_lambda(double t) {   // T10: warm_up_iter 10, T_max 50, lr_max 0.1, lr_min 1e-5
  if (t < 10) return t / 10;
  return (1e-5 + 0.5 * (0.1 - 1e-5) * (1 + std::cos((t - 10) / 40 * std::numbers::pi))) / 0.1;
}

TEST(LambdaSchedule, IsTheSourcesLambdaRelativeToEachBase) {
  const LrSchedule s = parse_lr_schedule("lambda-warmup-cosine:warm_up_iter=10,t_max=50,lr_max=0.1,lr_min=1e-5");
  for (double base : {0.1, 0.01})
    for (int64_t t : {0, 1, 5, 10, 11, 30, 49, 50, 60})
      EXPECT_DOUBLE_EQ(s.lr(base, t), base * source_lambda(double(t))) << t;
  // warmup-cosine's lr_min is absolute (CosineAnnealingLR's eta_min): equal at base = lr_max only.
  const LrSchedule w = parse_lr_schedule("warmup-cosine:warmup=10,t_max=50,lr_min=1e-5");
  EXPECT_DOUBLE_EQ(w.lr(0.1, 50), s.lr(0.1, 50));
  EXPECT_NE(w.lr(0.01, 50), s.lr(0.01, 50));
  EXPECT_THROW(parse_lr_schedule("lambda-warmup-cosine:warm_up_iter=10,t_max=50"), ValueError);   // no lr_max
  EXPECT_THROW(parse_lr_schedule("lambda-warmup-cosine:warm_up_iter=60,t_max=50,lr_max=0.1"), ValueError);
  EXPECT_THROW(parse_lr_schedule("lambda-warmup-cosine:warm_up_iter=10,t_max=50,lr_max=0.1,lr_min=1"), ValueError);
}

json train(const std::string& flags, const std::string& name) {
  const fs::path out = fs::temp_directory_path() / ("oomlab_recipe_" + name + ".json");
  const CliRun r = run_oomlab("train --model mlp --dataset synthetic --synthetic-size 96 --quiet --log-every 0 " +
                              flags + " --json " + out.string());
  EXPECT_EQ(r.code, 0) << r.output;
  json j = r.code == 0 ? json::parse(std::ifstream(out)) : json::object();
  fs::remove(out);
  return j;
}

TEST(CliRecipe, LrGroupsFollowTheScheduleFromTheirOwnBase) {
  const json j = train("--batch 16 --steps 12 --optimizer sgd --lr 0.1 --lr-groups 5.=0.1,1.=2 "
                       "--schedule lambda-warmup-cosine:warm_up_iter=4,t_max=10,lr_max=0.1,lr_min=1e-5", "groups");
  const json& h = j["metrics"]["history"]["lr_groups"];
  ASSERT_EQ(h.size(), 12u);
  for (size_t i = 0; i < h.size(); ++i) {
    ASSERT_EQ(h[i].size(), 3u);   // the rest, then 5.* and 1.* in the flag's order
    EXPECT_NEAR(h[i][1].get<double>(), 0.1 * h[i][0].get<double>(), 1e-15);
    EXPECT_NEAR(h[i][2].get<double>(), 2.0 * h[i][0].get<double>(), 1e-15);
  }
  EXPECT_NEAR(h[0][0].get<double>(), 0.1 * 1 / 4, 1e-15);   // the lr after step 1: base x lambda(1)
  EXPECT_EQ(j["config"]["lr_groups"], "5.=0.1,1.=2");
}

TEST(CliRecipe, EmaReportsTheRawWeightsAndTtaRuns) {
  const json plain = train("--batch 16 --steps 6 --ema 0.5 --seed 4", "ema");
  ASSERT_TRUE(plain["metrics"].contains("final_test_accuracy_raw"));
  const json tta = train("--batch 16 --steps 6 --ema 0.5 --seed 4 --tta flip", "tta");
  EXPECT_EQ(plain["metrics"]["history"]["train_loss"], tta["metrics"]["history"]["train_loss"]);   // same training
  EXPECT_EQ(tta["config"]["tta"], "flip");
  EXPECT_TRUE(tta["metrics"]["final_test_accuracy"].is_number());
}

TEST(CliRecipe, DistributedEvaluationCountsEverySampleOnceAndReportsThePadding) {
  // 96 samples: the synthetic test split is a quarter (24); 5 ranks pad it to 25.
  const json j = train("--steps 2 --parallel ddp --devices 5 --batch 4", "ddp");
  const json& e = j["metrics"]["history"]["epochs"].back();
  const json one = train("--steps 2 --batch 20", "one");
  EXPECT_EQ(e["test_samples"], one["metrics"]["history"]["epochs"].back()["test_samples"]);
  ASSERT_TRUE(e.contains("test_padding_samples")) << e;
  EXPECT_GT(e["test_padding_samples"].get<int64_t>(), 0);
  EXPECT_TRUE(e["test_accuracy_padding_kept"].is_number());
}

TEST(CliRecipe, BadRecipeFlagsAreClearErrors) {
  struct Case { std::string flags, want; };
  for (const Case& c : std::vector<Case>{
           {"--lr-groups fc", "is not NAME_PREFIX=FACTOR"},
           {"--lr-groups 5.=0", "must be a positive number"},
           {"--lr-groups 5.=x", "must be a positive number"},
           {"--lr-groups 5.=1,5.=2", "given twice"},
           {"--lr-groups 5.=1,", "an empty group"},
           {"--lr-groups nosuch.=2", "no parameter of mlp has a name starting with it"},
           {"--tta mirror", "--tta must be none or flip"},
           {"--schedule lambda-warmup-cosine:warm_up_iter=3", "missing key 't_max'"}}) {
    const CliRun r =
        run_oomlab("train --model mlp --dataset synthetic --synthetic-size 32 --batch 8 --steps 1 " + c.flags);
    EXPECT_EQ(r.code, 2) << c.flags << ": " << r.output;
    EXPECT_NE(r.output.find(c.want), std::string::npos) << c.flags << ": " << r.output;
  }
  const CliRun bert = run_oomlab("train --model bert-tiny --dataset synthetic-seq --steps 1 --tta flip");
  EXPECT_EQ(bert.code, 2);
  EXPECT_NE(bert.output.find("--tta flip applies to image classification models"), std::string::npos) << bert.output;
}

TEST(CliFusedAttention, TrainsAsEagerAndSavesLess) {
  auto run = [](const std::string& flags, const std::string& name) {
    const fs::path out = fs::temp_directory_path() / ("oomlab_attn_" + name + ".json");
    const CliRun r = run_oomlab(flags + " --json " + out.string());
    EXPECT_EQ(r.code, 0) << r.output;
    json j = r.code == 0 ? json::parse(std::ifstream(out)) : json::object();
    fs::remove(out);
    return j;
  };
  const std::string train =
      "train --model bert-tiny --dataset synthetic-seq --synthetic-size 64 --eval-batches 1 --steps 4 --batch 8 "
      "--quiet "
      "--attention ";
  const json eager = run(train + "eager", "eager"), fused = run(train + "fused", "fused");
  const json &a = eager["metrics"]["history"]["train_loss"], &b = fused["metrics"]["history"]["train_loss"];
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)   // the same dropout draws: equal up to float rounding
    EXPECT_NEAR(a[i].get<double>(), b[i].get<double>(), 1e-5 * std::abs(a[i].get<double>()));
  // Checkpointing recomputes the fused op with the same dropout draws; AMP runs it in float32.
  EXPECT_EQ(run(train + "fused --checkpoint all", "ckpt")["metrics"]["history"]["train_loss"], b);
  EXPECT_TRUE(run(train + "fused --amp bf16", "amp")["metrics"]["history"]["train_loss"][3].is_number());
  const std::string est = "estimate --model bert-base --seq-len 384 --batch 24 --optimizer adamw --attention ";
  const double pe = run(est + "eager", "est_e")["metrics"]["exact"]["peak_allocated_bytes"].get<double>();
  const double pf = run(est + "fused", "est_f")["metrics"]["exact"]["peak_allocated_bytes"].get<double>();
  EXPECT_LT(pf, 0.7 * pe);   // the s x s terms gone (PyTorch's SDPA on an H100: 7.35 GB vs 11.87 GB eager)
  const CliRun bad = run_oomlab("estimate --model resnet20 --batch 2 --attention fused");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("--attention applies to BERT models"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace oomlab
