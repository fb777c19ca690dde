// test_verdicts.cpp — every experiment driver's verdict function under the shared rule
// (experiments/runner/verdict_rule.h) on data where its claim holds, fails, and sits inside
// the noise (or, for exact meta-device figures, on either side of the bar: exact figures have
// no noise band). Drivers are reached through the registry, with their folder's
// experiment.json; summaries are the committed results' (reports/results/), edited, or built
// here when the driver's summary gained fields since those results ran.
// ctest tier: unit
#include <gtest/gtest.h>

#include "tests/verdict_test_util.h"

namespace oomlab {
namespace {

// ---- exact (meta) figures: holds / fails, and no noise band at the bar ----------------------

TEST(Verdict01, TableAndTrainingFactor) {
  json s = committed_summary("01_vgg16_memory");
  s["totals"]["training_over_activations"] = 2.0;
  EXPECT_EQ(status("01_vgg16_memory", s), "confirmed");
  s["totals"]["training_over_activations"] = 1.18;   // what VGG16 measures: activation grads freed layer by layer
  EXPECT_EQ(status("01_vgg16_memory", s), "depends");
  s["totals"]["params"] = 1e6;
  EXPECT_EQ(status("01_vgg16_memory", s), "refuted");
  s = committed_summary("01_vgg16_memory");
  s["totals"]["training_over_activations"] = 1.5001;   // exact figures: just inside the bar holds
  EXPECT_EQ(status("01_vgg16_memory", s), "confirmed");
  s["totals"]["training_over_activations"] = 1.4999;
  EXPECT_EQ(status("01_vgg16_memory", s), "depends");
}

TEST(Verdict02, LinearityAndFormula) {
  json s = committed_summary("02_memory_vs_batch");
  EXPECT_EQ(status("02_memory_vs_batch", s), "depends");   // linear; the formula is off by up to 29%
  for (json& r : s["rows"]) r["formula_error_pct"] = 3.0;
  EXPECT_EQ(status("02_memory_vs_batch", s), "confirmed");
  for (json& f : s["fits"]) f["r2"] = 0.9;
  for (json& r : s["rows"]) r["formula_error_pct"] = 30.0;
  EXPECT_EQ(status("02_memory_vs_batch", s), "refuted");
  for (json& f : s["fits"]) f["r2"] = 0.99901;   // exact: just above the bar
  for (json& r : s["rows"]) r["formula_error_pct"] = 9.99;
  EXPECT_EQ(status("02_memory_vs_batch", s), "confirmed");
}

TEST(Verdict04, KorthikantiFormula) {
  json s = committed_summary("04_transformer_activation_memory");
  EXPECT_EQ(status("04_transformer_activation_memory", s), "confirmed");
  s["max_rel_error_vs_fp32_formula"] = 0.2;
  EXPECT_EQ(status("04_transformer_activation_memory", s), "refuted");
  s["max_rel_error_vs_fp32_formula"] = 0.01;   // exactly the tolerance: holds
  EXPECT_EQ(status("04_transformer_activation_memory", s), "confirmed");
}

TEST(Verdict08, RecoveryCountsAreExact) {
  json s = committed_summary("08_oom_recovery");
  EXPECT_EQ(status("08_oom_recovery", s), "confirmed");
  EXPECT_NE(reason("08_oom_recovery", s).find("single runs: not judged"), std::string::npos);
  s["policies"]["skip"]["samples_lost"] = 1;
  EXPECT_EQ(status("08_oom_recovery", s), "depends");
  s["policies"]["raise"]["status"] = "ok";
  s["policies"]["split"]["samples_lost"] = 16;
  EXPECT_EQ(status("08_oom_recovery", s), "refuted");
}

TEST(Verdict10, TrafficExactBackendsPendingGpu) {
  json s = committed_summary("10_allreduce");
  EXPECT_EQ(status("10_allreduce", s), "pending GPU");   // traffic holds; the NCCL claim needs a GPU
  for (json& t : s["traffic"]) t["worst_relative_miss"] = 0.5;
  EXPECT_EQ(status("10_allreduce", s), "refuted");
}

TEST(Verdict09, PendingRowsAreNeverConfirmed) {
  json s = committed_summary("09_practical_tricks");
  for (json& r : s["rows"]) r["status"] = "confirmed";
  EXPECT_EQ(status("09_practical_tricks", s), "confirmed");
  s["rows"][0]["status"] = "pending";
  EXPECT_EQ(status("09_practical_tricks", s), "pending GPU");
  s["rows"][1]["status"] = "refuted";
  EXPECT_EQ(status("09_practical_tricks", s), "depends");
}

// 15: fused attention's saved bytes per sample linear in the length, eager's quadratic.
json summary_15(double fused_quad, double fused_batch_2048, double loss_diff) {
  auto rows = [](double quad, double batch_2048, double bytes_2048) {
    return json{{"rows", {{{"seq", 128}, {"saved_per_sample_bytes", bytes_2048 / 16}, {"quadratic_share", quad / 16},
                           {"largest_batch", 100}},
                          {{"seq", 2048}, {"saved_per_sample_bytes", bytes_2048}, {"quadratic_share", quad},
                           {"largest_batch", batch_2048}}}}};
  };
  return {{"memory", {{"eager", rows(0.8, 1, 6.7e9)}, {"fused", rows(fused_quad, fused_batch_2048, 1.3e9)}}},
          {"anchor_b24_s384", {{"eager", 11.8e9}, {"fused", 7.6e9}}},
          {"loss_max_rel_diff", loss_diff}, {"profile", "full"}};
}

TEST(Verdict15, FusedAttentionLinearExactSpeedPendingGpu) {
  EXPECT_EQ(status("15_fused_attention", summary_15(0.0, 7, 0.0)), "pending GPU");   // memory holds; speed needs a GPU
  EXPECT_EQ(status("15_fused_attention", summary_15(0.05, 7, 0.0)), "depends");      // a quadratic term left
  EXPECT_EQ(status("15_fused_attention", summary_15(0.0, 0, 0.0)), "depends");       // a smaller batch
  EXPECT_EQ(status("15_fused_attention", summary_15(0.0, 7, 1e-3)), "depends");      // another function
  EXPECT_EQ(status("15_fused_attention", summary_15(0.0009, 7, 1e-6)), "pending GPU");   // exact: inside the bar
}

// 16: a summary built here: two models, each technique with its peak saving and largest batch.
json summary_16(double formula_error, double share, double saving, int64_t extra_batch) {
  json models = json::array();
  for (const char* m : {"net_a", "net_b"}) {
    json t = {{"fp32", {{"saving", 0.0}, {"largest_batch", {{"24GiB", 100}}}}}};
    for (const char* tech : {"amp-fp16", "checkpoint-sqrt"})
      t[tech] = {{"saving", saving}, {"largest_batch", {{"24GiB", 100 + extra_batch}}}};
    models.push_back({{"model", m}, {"params", 1e6}, {"peak_bytes", 1e9}, {"formula_bytes", 1e9 * (1 + formula_error)},
                      {"formula_error", formula_error}, {"activation_share", share}, {"techniques", t}});
  }
  return {{"models", models}, {"batch", 8}, {"profile", "full"}};
}

TEST(Verdict16, FormulaActivationsAndTechniques) {
  EXPECT_EQ(status("16_your_model_memory", summary_16(0.1, 0.7, 0.2, 50)), "pending GPU");  // all hold; GPU points open
  EXPECT_EQ(status("16_your_model_memory", summary_16(0.7, 0.7, 0.2, 50)), "depends");       // the formula misses
  EXPECT_EQ(status("16_your_model_memory", summary_16(0.1, 0.7, -0.01, 50)), "depends");     // a technique costs memory
  EXPECT_EQ(status("16_your_model_memory", summary_16(0.7, 0.3, -0.1, -10)), "refuted");     // every judged claim fails
  EXPECT_EQ(status("16_your_model_memory", summary_16(0.25, 0.7, 0.2, 50)), "pending GPU");  // exact: at the bar holds
  EXPECT_EQ(status("16_your_model_memory", summary_16(-0.2501, 0.7, 0.2, 50)), "depends");   // just outside, below
  EXPECT_NE(reason("16_your_model_memory", summary_16(0.7, 0.7, 0.2, 50)).find("outside it for net_a +70%"),
            std::string::npos);
}

// 17: a summary built here: two models, eager and graphed, the replays' allocations and the
// graphed peak's excess over the eager one.
json summary_17(double per_replay, double peak_over, int64_t batch_change) {
  json models = json::array();
  for (const char* m : {"net_a", "net_b"}) {
    const json eager = {{"allocations_per_step", 600.0}, {"peak_bytes", 3e9}, {"reserved_bytes", 3.2e9},
                        {"pool_bytes", 0}, {"largest_batch", 300}};
    const json graphs = {{"allocations_per_step", per_replay}, {"peak_bytes", 3e9 + peak_over},
                         {"reserved_bytes", 3.5e9}, {"pool_bytes", 3.1e9}, {"largest_batch", 300 + batch_change}};
    models.push_back({{"model", m}, {"eager", eager}, {"graphs", graphs}});
  }
  return {{"models", models}, {"card", "24GiB"}, {"profile", "full"}};
}

TEST(Verdict17, ReplaysAllocateNothingThePeakAndTheFit) {
  const double block = 1048576;
  EXPECT_EQ(status("17_cuda_graphs", summary_17(0, 0, 0)), "pending GPU");        // all hold; the speed needs a GPU
  EXPECT_EQ(status("17_cuda_graphs", summary_17(3, 0, 0)), "depends");            // replays allocate
  EXPECT_EQ(status("17_cuda_graphs", summary_17(0, 5e8, 0)), "depends");          // the graph needs more memory
  EXPECT_EQ(status("17_cuda_graphs", summary_17(0, 0, -1)), "depends");           // a smaller batch fits the card
  EXPECT_EQ(status("17_cuda_graphs", summary_17(1, 5e8, -50)), "refuted");        // every judged claim fails
  EXPECT_EQ(status("17_cuda_graphs", summary_17(0, block, 0)), "pending GPU");    // exact: at the bar holds
  EXPECT_EQ(status("17_cuda_graphs", summary_17(0, block + 1, 0)), "depends");    // just above it
  EXPECT_NE(reason("17_cuda_graphs", summary_17(0, 0, 0)).find("net_a: 600 allocations per eager step, 0 per replay"),
            std::string::npos);
  EXPECT_NE(reason("17_cuda_graphs", summary_17(0, 0, -40)).find("net_a 300 eager / 260 graphed"), std::string::npos);
}

// 18: a summary built here: two models in both layouts, the channels_last peak's difference
// from NCHW's and the change of the largest batch on the card.
json summary_18(double peak_diff, int64_t batch_change) {
  json models = json::array();
  for (const char* m : {"net_a", "net_b"}) {
    const json nchw = {{"peak_bytes", 3e9}, {"reserved_bytes", 3.2e9}, {"largest_batch", 300}};
    const json cl = {{"peak_bytes", 3e9 + peak_diff}, {"reserved_bytes", 3.2e9}, {"largest_batch", 300 + batch_change}};
    models.push_back({{"model", m}, {"nchw", nchw}, {"channels_last", cl}});
  }
  return {{"models", models}, {"card", "24GiB"}, {"profile", "full"}};
}

TEST(Verdict18, ThePeakWithinBlockRoundingAndTheFit) {
  const double rounding = 2097152;
  EXPECT_EQ(status("18_channels_last", summary_18(0, 0)), "pending GPU");              // both hold; speed needs a GPU
  EXPECT_EQ(status("18_channels_last", summary_18(19267584, 0)), "depends");           // an input batch's copy kept
  EXPECT_EQ(status("18_channels_last", summary_18(0, -2)), "depends");                 // a smaller batch fits
  EXPECT_EQ(status("18_channels_last", summary_18(5e8, -40)), "refuted");              // every judged claim fails
  EXPECT_EQ(status("18_channels_last", summary_18(-rounding, 3)), "pending GPU");      // exact: at the bar holds
  EXPECT_EQ(status("18_channels_last", summary_18(rounding + 1, 0)), "depends");       // just above it
  EXPECT_NE(reason("18_channels_last", summary_18(0, -2)).find("net_a 300 NCHW / 298 channels_last (2 fewer, 0.7%)"),
            std::string::npos);
}

}  // namespace
}  // namespace oomlab
