// test_tricks.cpp — `oomlab trick` probes (experiments/measure/tricks.h) on the meta device: the
// mechanisms their figures rest on. An evaluation loop without no_grad keeps each
// iteration's activations (growth > 0 per iteration) while a detached total keeps nothing;
// under no_grad, naming every intermediate holds them all (peak far above rebinding one
// name); empty_cache releases reserved memory, never allocated memory, and the next step
// reserves the same peak again; unknown tricks are clear errors.
// ctest tier: models
#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "experiments/measure/tricks.h"

using namespace oomlab;

namespace {
// The variant named `name`, else the first whose name starts with it.
const nlohmann::json& variant(const nlohmann::json& t, const std::string& starts_with) {
  for (const auto& v : t["variants"])
    if (v["variant"] == starts_with) return v;
  for (const auto& v : t["variants"])
    if (v["variant"].get<std::string>().rfind(starts_with, 0) == 0) return v;
  throw ValueError("no variant " + starts_with);
}
}  // namespace

TEST(Tricks, GraphHistoryGrowsOnlyWhereNothingFreesTheActivations) {
  const nlohmann::json t = measure_trick("graph-history", 32);
  const double eval = variant(t, "eval without no_grad")["growth_bytes_per_iteration"].get<double>();
  EXPECT_GT(eval, 32 * (256 + 128) * 4);   // at least the hidden activations of 32 samples
  EXPECT_EQ(variant(t, "train: total_loss += loss.detach")["growth_bytes_per_iteration"].get<double>(), 0.0);
  // Backward frees the saved activations: the kept history holds graph nodes, not device memory.
  EXPECT_LT(variant(t, "train: total_loss += loss")["growth_bytes_per_iteration"].get<double>(), eval / 100);
}

TEST(Tricks, NamingIntermediatesMattersForInference) {
  const nlohmann::json t = measure_trick("del-intermediates", 16);
  const auto peak = [&](const char* v) { return variant(t, v)["forward_peak_bytes"].get<int64_t>(); };
  EXPECT_GT(peak("inference (no_grad), every"), 3 * peak("inference (no_grad), x ="));
  EXPECT_GE(peak("training (grad), every"), peak("training (grad), x ="));
  EXPECT_GT(peak("training (grad), x ="), 3 * peak("inference (no_grad), x ="));
}

TEST(Tricks, EmptyCacheReleasesReservedNotAllocated) {
  const nlohmann::json t = measure_trick("empty-cache", 64);   // (at 16 every segment still holds a live block)
  EXPECT_EQ(t["after_empty_cache"]["allocated_bytes"], t["before_empty_cache"]["allocated_bytes"]);
  EXPECT_LT(t["after_empty_cache"]["reserved_bytes"].get<int64_t>(),
            t["before_empty_cache"]["reserved_bytes"].get<int64_t>());
  EXPECT_GE(t["after_empty_cache"]["reserved_bytes"].get<int64_t>(),
            t["after_empty_cache"]["allocated_bytes"].get<int64_t>());
  EXPECT_EQ(t["next_step"]["reserved_peak_bytes"], t["before_empty_cache"]["reserved_bytes"]);
  EXPECT_GT(t["next_step"]["device_allocations"].get<int64_t>(), 0);
}

// After BatchNorm (which saves its input, not its output) an out-of-place ReLU's input dies
// right after the call: in place saves one ReLU output at the forward's peak, the moment both
// exist, not in what is kept for backward.
TEST(Tricks, InplaceReluSavesOneActivationAtTheForwardPeak) {
  const nlohmann::json t = measure_trick("inplace-relu", 64);
  const nlohmann::json &out = variant(t, "ReLU()"), &in = variant(t, "ReLU(inplace=True)");
  const int64_t one = t["relu_output_bytes"].get<int64_t>();
  const int64_t saved = out["forward_peak_bytes"].get<int64_t>() - in["forward_peak_bytes"].get<int64_t>();
  EXPECT_NEAR(double(saved), double(one), 0.01 * double(one));
  EXPECT_NEAR(double(in["activation_bytes"].get<int64_t>()), double(out["activation_bytes"].get<int64_t>()),
              0.05 * double(one));
}

TEST(Tricks, UnknownTrickAndBadBatchAreClearErrors) {
  try {
    measure_trick("no-such-trick", 8);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown trick 'no-such-trick' (graph-history"), std::string::npos);
  }
  EXPECT_THROW(measure_trick("empty-cache", 0), ValueError);
}
