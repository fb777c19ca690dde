// test_time_model.cpp — the planner's step-time model (experiments/plan/time_model.h): each
// feature is its counted work over the card's datasheet figure, in the class the work ran
// in; a hostile calibration file is one ValueError naming the file and the field; and the
// committed calibration (reports/plan_calibration.json, fitted by scripts/plan_calibration.py)
// is what the C++ side computes: a committed pair's features and fitted time come out equal.
// ctest tier: models
#include <gtest/gtest.h>

#include <fstream>

#include "engine/core/error.h"
#include "experiments/plan/time_model.h"
#include "temp_dir_util.h"

using namespace oomlab;

namespace {
double at_peak_ms(double flops, double tflops) { return flops / (tflops * 1e12) * 1e3; }

MemoryEstimate estimate(const std::string& model, int64_t batch, std::optional<DType> amp = std::nullopt,
                        bool channels_last = false) {
  RunSpec s = RunSpec::for_model(model);
  s.amp = amp;
  s.channels_last = channels_last;
  return estimate_memory(s, batch, "sgd");
}

std::string write(const TempDir& d, const std::string& text) {
  const std::string path = d.file("cal.json");
  std::ofstream(path) << text;
  return path;
}

void expect_value_error(const std::string& path, const std::string& words) {
  try {
    load_time_model(path);
    FAIL() << "expected a ValueError for " << words;
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}
}  // namespace

TEST(TimeModel, FeaturesAreTheCountedWorkAtTheCardsFigures) {
  const GpuSpec& h100 = find_gpu("h100-sxm");
  const MemoryEstimate fp32 = estimate("tiny-ff", 8), bf16 = estimate("tiny-ff", 8, DType::bf16);
  const double gemm = fp32.step_cost.flops.at("gemm").at("float32");
  EXPECT_DOUBLE_EQ(time_features(fp32, h100, parse_tf32_use("none")).at("gemm.fp32"), at_peak_ms(gemm, 67));
  EXPECT_DOUBLE_EQ(time_features(fp32, h100, parse_tf32_use("all")).at("gemm.tf32"), at_peak_ms(gemm, 494.5));
  EXPECT_DOUBLE_EQ(time_features(fp32, h100, parse_tf32_use("cudnn")).at("gemm.fp32"), at_peak_ms(gemm, 67));
  const TimeFeatures f = time_features(bf16, h100, Tf32Use{});
  EXPECT_DOUBLE_EQ(f.at("gemm.16"), at_peak_ms(bf16.step_cost.flops.at("gemm").at("bfloat16"), 989.5));
  EXPECT_DOUBLE_EQ(f.at("launches"), double(bf16.step_cost.launches) * 1e-3);
  const double opt_bytes = 2.0 * double(bf16.params_bytes + bf16.grads_bytes + bf16.optimizer_state_bytes);
  EXPECT_DOUBLE_EQ(f.at("bytes"), (double(bf16.step_cost.allocated_bytes) + opt_bytes) / 3350e9 * 1e3);
  EXPECT_THROW(time_features(bf16, find_gpu("t4"), Tf32Use{}), ValueError);   // Turing: no bf16 tensor cores
  EXPECT_THROW(parse_tf32_use("some"), ValueError);
}

TEST(TimeModel, ConvolutionsFollowCudnnsTf32AndTheirLayout) {
  const GpuSpec& h200 = find_gpu("h200");
  const MemoryEstimate nchw = estimate("resnet20", 4), nhwc = estimate("resnet20", 4, std::nullopt, true);
  const double conv = nchw.step_cost.flops.at("conv").at("float32");
  const TimeFeatures a = time_features(nchw, h200, parse_tf32_use("cudnn")), b = time_features(nhwc, h200, Tf32Use{});
  EXPECT_DOUBLE_EQ(a.at("conv.tf32"), at_peak_ms(conv, 494.5));
  EXPECT_DOUBLE_EQ(a.at("conv_channels_last"), 0);
  EXPECT_DOUBLE_EQ(b.at("conv.tf32"), a.at("conv.tf32"));   // the same work, in the same class
  EXPECT_DOUBLE_EQ(b.at("conv_channels_last"), a.at("conv.tf32"));
  EXPECT_DOUBLE_EQ(time_features(nchw, h200, parse_tf32_use("none")).at("conv.fp32"), at_peak_ms(conv, 67));
}

TEST(TimeModel, PredictsTheSumOfTermsAndNamesTermsItNeverSaw) {
  TimeModel m;
  m.coefficients = {{"gemm.16", 2.0}, {"launches", 3.0}};
  m.seen = {{"gemm.16", 4}, {"launches", 9}};
  const TimeFeatures f = {{"gemm.16", 1.5}, {"launches", 0.5}, {"attention", 0.25}, {"bytes", 0}};
  EXPECT_DOUBLE_EQ(m.predict_ms(f), 2.0 * 1.5 + 3.0 * 0.5);
  EXPECT_EQ(m.unseen(f), std::vector<std::string>{"attention"});
}

TEST(TimeModel, AHostileCalibrationFileIsOneValueErrorNamingIt) {
  TempDir d("time_model");
  expect_value_error(d.file("absent.json"), "cannot be read");
  expect_value_error(write(d, "{not json"), "not a JSON object");
  expect_value_error(write(d, "[1, 2]"), "not a JSON object");
  expect_value_error(write(d, R"({"model": {}})"), "model.coefficients");
  expect_value_error(write(d, R"({"model": {"coefficients": {"gemm.fp64": 1}}})"), "gemm.fp64");
  expect_value_error(write(d, R"({"model": {"coefficients": {"bytes": -1}}})"), "model.coefficients.bytes");
  expect_value_error(write(d, R"({"model": {"coefficients": {"bytes": "1"}}})"), "model.coefficients.bytes");
  expect_value_error(write(d, R"({"model": {"coefficients": {"bytes": 1e999}}})"), "time model");
  const TimeModel ok =
      load_time_model(write(d, R"({"model": {"coefficients": {"bytes": 1.5}, "seen": {"bytes": 2}}})"));
  EXPECT_DOUBLE_EQ(ok.coefficients.at("bytes"), 1.5);
  EXPECT_EQ(ok.seen.at("bytes"), 2);
}

// The committed fit and this build agree: a pair's features, recomputed here from its
// estimate flags, equal the file's, and the model's prediction is the file's fitted time.
TEST(TimeModel, TheCommittedCalibrationIsWhatThisBuildComputes) {
  const TimeModel* m = default_time_model();
  ASSERT_NE(m, nullptr) << "reports/plan_calibration.json";
  std::ifstream in(m->source);
  const nlohmann::json cal = nlohmann::json::parse(in);
  const nlohmann::json* pair = nullptr;
  for (const nlohmann::json& p : cal["pairs"])   // a small configuration: bert-base at s128
    if (p["tag"] == "bert_bf16" && p["card"] == "h100") pair = &p;
  ASSERT_NE(pair, nullptr);
  RunSpec s = RunSpec::for_model("bert-base");
  s.seq_len = 128;
  s.amp = DType::bf16;
  ASSERT_EQ((*pair)["estimate"], "--model bert-base --batch 32 --seq-len 128 --amp bf16 --optimizer adamw");
  const TimeFeatures f = time_features(estimate_memory(s, 32, "adamw"), find_gpu("h100-sxm"), Tf32Use{});
  for (const auto& [name, value] : (*pair)["features_ms"].items())
    EXPECT_NEAR(f.at(name), value.get<double>(), 1e-9 * std::max(1.0, value.get<double>())) << name;
  EXPECT_NEAR(m->predict_ms(f), (*pair)["fitted_ms"].get<double>(), 1e-6);
}
