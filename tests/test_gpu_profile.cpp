// test_gpu_profile.cpp — the matrix on every device (issue 49): `oomlab run --device`, the
// gpu profile (block profiles, rounds, interleaved twins, keep_device, CUDA-only flags left
// out off a GPU, gpu_only points) and its claims judged by the verdict rule; a run asking
// for a GPU where none is fails before anything is written. The experiments' own gpu
// profiles expand and their claims check; their dry run on meta is the GPU kit's (slow tier).
// ctest tier: cli
#include <gtest/gtest.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "experiments/runner/experiment_runner.h"
#include "experiments/runner/gpu_claims.h"
#include "experiments/runner/matrix.h"
#include "experiments/runner/registry.h"
#include "tests/temp_dir_util.h"

using namespace oomlab;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
const char* kSpec = R"({"name": "x", "device": "meta", "matrix": [
  {"name": "est", "command": "estimate", "options": {"model": "mlp", "batch": 2}},
  {"name": "step", "command": "train", "profiles": ["gpu"], "rounds": 2, "interleave": "t",
   "options": {"model": "mlp", "dataset": "synthetic", "steps": 2, "allow-tf32": "all"},
   "axes": [{"name": "amp", "values": ["off", "bf16"]}]},
  {"name": "twin", "command": "torch", "profiles": ["gpu"], "rounds": 2, "interleave": "t",
   "options": {"tag": "r50_tf32"}},
  {"name": "meta", "command": "train", "profiles": ["gpu"], "keep_device": true,
   "options": {"model": "mlp", "dataset": "synthetic", "steps": 1, "device": "meta"}},
  {"name": "cpu", "command": "train", "profiles": ["gpu"],
   "options": {"model": "mlp", "dataset": "synthetic", "steps": 1, "device": "cpu"}}]})";

std::vector<std::string> names(const std::vector<PointSpec>& ps) {
  std::vector<std::string> out;
  for (const PointSpec& p : ps) out.push_back(p.name);
  return out;
}
std::string flag(const PointSpec& p, const std::string& name) {
  for (const auto& [k, v] : p.flags)
    if (k == name) return v;
  return "<none>";
}
bool gpu_here() {
  const BackendHooks h = backend_hooks(DeviceType::cuda);
  if (!h.physical) return false;
  try {
    h.physical(0);
    return true;
  } catch (const Error&) {
    return false;
  }
}
}  // namespace

TEST(GpuProfile, BlocksBelongToTheirProfilesAndRoundsAlternate) {
  const json spec = json::parse(kSpec);
  EXPECT_EQ(names(expand_matrix(spec, "quick", {}, "s")), std::vector<std::string>{"est"});
  const std::vector<PointSpec> g = expand_matrix(spec, "gpu", {}, "s");
  EXPECT_EQ(names(g), (std::vector<std::string>{"step round=1 amp=off", "step round=1 amp=bf16", "twin round=1",
                                                "step round=2 amp=off", "step round=2 amp=bf16", "twin round=2",
                                                "meta", "cpu"}));
  EXPECT_EQ(g[0].block, "step");
  EXPECT_EQ(g[0].axes, json({{"round", 1}, {"amp", "off"}}));
  EXPECT_TRUE(g[2].gpu_only);
  EXPECT_EQ(flag(g[0], "device"), "cuda");   // the gpu profile's default device
  EXPECT_EQ(flag(g[0], "allow-tf32"), "all");
  EXPECT_EQ(flag(g[6], "device"), "meta");
  EXPECT_EQ(flag(g[7], "device"), "cpu");   // no override: a block's own device stays
  // A profile no block belongs to is refused, naming those the spec has.
  json only_quick = json::parse(R"({"name": "x", "matrix": {"command": "estimate", "options": {"model": "mlp"}}})");
  try {
    expand_matrix(only_quick, "gpu", {}, "s");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("no block of the matrix belongs to the 'gpu' profile (it has: full, quick)"),
              std::string::npos) << e.what();
  }
}

TEST(GpuProfile, ADeviceOverridesEveryBlockButTheKeptOnesAndDropsCudaOnlyFlags) {
  const std::vector<PointSpec> g = expand_matrix(json::parse(kSpec), "gpu", {}, "s", "meta");
  EXPECT_EQ(flag(g[0], "device"), "meta");
  EXPECT_EQ(flag(g[0], "allow-tf32"), "<none>");   // applies only on cuda: left out, and named
  EXPECT_EQ(g[0].dropped, std::vector<std::string>{"allow-tf32"});
  EXPECT_EQ(flag(g[6], "device"), "meta");   // keep_device
  EXPECT_EQ(flag(g[7], "device"), "meta");   // overridden
  const std::vector<PointSpec> c = expand_matrix(json::parse(kSpec), "gpu", {}, "s", "cuda:1");
  EXPECT_EQ(flag(c[0], "device"), "cuda:1");
  EXPECT_EQ(flag(c[0], "allow-tf32"), "all");
  EXPECT_TRUE(c[0].dropped.empty());
}

TEST(GpuProfile, BadBlocksAndClaimsAreRefused) {
  auto refused = [](const std::string& block) {
    const json spec = json::parse(R"({"name": "x", "matrix": [)" + block + "]}");
    EXPECT_THROW(expand_matrix(spec, "gpu", {}, "s"), ValueError) << block;
  };
  refused(R"({"command": "estimate", "profiles": ["gpu", "huge"]})");
  refused(R"({"command": "estimate", "profiles": ["gpu"], "rounds": 0})");
  refused(R"({"command": "estimate", "profiles": ["gpu"], "rounds": 100})");
  refused(R"({"command": "estimate", "profiles": ["gpu"], "interleave": "t"})");   // no rounds
  refused(R"({"command": "estimate", "profiles": ["gpu"], "axes": [{"name": "round", "values": [1]}]})");
  refused(R"({"command": "torch", "profiles": ["gpu"], "options": {"device": "cuda"}})");
  const json spec = json::parse(kSpec);
  const std::vector<PointSpec> g = expand_matrix(spec, "gpu", {}, "s");
  for (const char* claim :
       {R"({"name": "a", "metric": "speed", "other": {"block": "step"}, "below": 1})",
        R"({"name": "a", "metric": "step_time", "other": {"block": "nope"}, "below": 1})",
        R"({"name": "a", "metric": "step_time", "other": {"block": "step"}})",
        R"({"name": "a", "metric": "step_time", "other": {"block": "step"}, "below": 1, "above": 0})",
        R"({"name": "a", "metric": "step_time", "other": {"block": "step"}, "within": [1]})",
        R"({"name": "a", "metric": "ok", "other": {"block": "step"}, "below": 1, "why": 0})"}) {
    json s = spec;
    s["gpu_claims"] = json::array({json::parse(claim)});
    EXPECT_THROW(check_gpu_claims(s, g, "s"), ValueError) << claim;
  }
}

namespace {
json point(const std::string& block, const std::string& amp, int round, double step_s, double peak,
           const char* dev = "cuda:0") {
  return {{"name", str_cat(block, " round=", round, " amp=", amp)}, {"block", block},
          {"axes", {{"round", round}, {"amp", amp}}}, {"outcome", {{"status", "ok"}}},
          {"metrics", {{"step_time_s", {{"median", step_s}}}, {"oom", {{"skipped_batches", 3}}}}},
          {"memory", {{"devices", {{dev, {{"allocated_bytes.all.peak", peak}}}}}}}};
}
}  // namespace

// Five alternating pairs judged by the verdict rule; exact peaks; on meta nothing is judged.
TEST(GpuProfile, ClaimsAreJudgedFromGpuPointsAndPendingOffAGpu) {
  json points = json::array();
  const double off[] = {0.100, 0.102, 0.099, 0.101, 0.100}, bf16[] = {0.060, 0.062, 0.059, 0.061, 0.060};
  for (int r = 0; r < 5; ++r) {
    points.push_back(point("step", "off", r + 1, off[r], 1000));
    points.push_back(point("step", "bf16", r + 1, bf16[r], 600));
  }
  const json spec = {{"gpu_claims", json::parse(R"([
    {"name": "faster", "metric": "step_time", "other": {"block": "step", "amp": "bf16"},
     "base": {"block": "step", "amp": "off"}, "below": 1.0},
    {"name": "2x faster", "metric": "step_time", "other": {"block": "step", "amp": "bf16"},
     "base": {"block": "step", "amp": "off"}, "below": 0.5},
    {"name": "smaller", "metric": "peak_allocated", "other": {"block": "step", "amp": "bf16"},
     "base": {"block": "step", "amp": "off"}, "within": [0.59, 0.61]},
    {"name": "skips", "metric": "metrics.oom.skipped_batches", "other": {"block": "step", "amp": "off"},
     "above": 0}])")}};
  const json s = gpu_claims_summary(spec, points, "cuda");
  ASSERT_EQ(s["claims"].size(), 4u);
  EXPECT_EQ(s["claims"][0]["judged"], "holds");
  EXPECT_EQ(s["claims"][0]["n"], 5);
  EXPECT_NEAR(s["claims"][0]["estimate"].get<double>(), 0.6, 0.01);
  EXPECT_EQ(s["claims"][1]["judged"], "fails");
  EXPECT_EQ(s["claims"][2]["judged"], "holds");
  EXPECT_DOUBLE_EQ(s["claims"][2]["estimate"].get<double>(), 0.6);
  EXPECT_EQ(s["claims"][3]["judged"], "holds");
  EXPECT_EQ(gpu_claims_verdict(s)["status"], "depends");
  // Too few pairs: inside the rule's "too few runs".
  json three = json::array();
  for (size_t i = 0; i < 6; ++i) three.push_back(points[i]);
  EXPECT_EQ(gpu_claims_summary(spec, three, "cuda")["claims"][0]["judged"], "too few runs");
  // A failed point leaves its pair out and is named.
  points[3]["outcome"]["status"] = "error";
  const json f = gpu_claims_summary(spec, points, "cuda:0");
  EXPECT_EQ(f["claims"][0]["n"], 4);
  EXPECT_EQ(f["claims"][0]["failed_points"], json::array({"step round=2 amp=bf16"}));
  // The same points from a meta dry run judge nothing.
  const json m = gpu_claims_verdict(gpu_claims_summary(spec, points, "meta"));
  EXPECT_EQ(m["status"], "pending GPU");
  EXPECT_NE(m["reason"].get<std::string>().find("measures no GPU"), std::string::npos);
}

// `oomlab run DIR --device cuda` on a machine without a GPU: one DeviceError naming the
// missing GPU, before anything is written (no results folder, no partial file).
TEST(GpuProfile, ACudaRunWithoutAGpuFailsBeforeWritingAnything) {
  if (gpu_here()) GTEST_SKIP() << "a GPU is here";
  const TempDir scratch("gpu_profile");
  const fs::path root = scratch.path;
  fs::create_directories(root / "experiments" / "05_amp");
  fs::copy_file(fs::path(OOMLAB_SOURCE_DIR) / "experiments" / "05_amp" / "experiment.json",
                root / "experiments" / "05_amp" / "experiment.json");
  for (const std::string& device : {std::string("cuda"), std::string("")}) {
    RunOptions o;
    o.device = device;
    o.profile = device.empty() ? "gpu" : "quick";   // the gpu profile's default device is cuda
    o.executable = std::string(OOMLAB_BINARY_DIR) + "/oomlab";
    o.quiet = true;
    try {
      run_experiment((root / "experiments" / "05_amp").string(), o);
      FAIL() << "ran";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("oomlab run --device cuda: "), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(fs::exists(root / "reports"));
}

// Every experiment's gpu profile expands to its declared count on cuda and as a dry run on
// meta, and its claims name blocks it has; the eleven the issue lists have one.
TEST(GpuProfile, TheExperimentsGpuProfilesExpandAndTheirClaimsCheck) {
  std::set<std::string> with_gpu;
  for (const auto& entry : fs::directory_iterator(std::string(OOMLAB_SOURCE_DIR) + "/experiments")) {
    if (!fs::exists(entry.path() / "experiment.json")) continue;
    const std::string name = entry.path().filename().string();
    const json spec = parse_experiment_spec(read_file((entry.path() / "experiment.json").string()), name);
    if (!spec.contains("gpu_claims")) continue;
    with_gpu.insert(name.substr(0, 2));
    const ExperimentDriver& d = experiment_driver(name);
    for (const char* device : {"", "meta"}) {
      std::vector<PointSpec> g;
      ASSERT_NO_THROW(g = expand_matrix(spec, "gpu", d.spec_keys, name, device)) << name;
      EXPECT_NO_THROW(check_gpu_claims(spec, g, name)) << name;
    }
  }
  for (const char* nn : {"05", "06", "08", "09", "10", "11", "12", "15", "16", "17", "18"})
    EXPECT_TRUE(with_gpu.count(nn)) << nn << " has no gpu profile";
}
