// test_matrix_runner.cpp — the generic matrix runner (`oomlab run`) on a test experiment
// registered here: each point runs in a child process, and an OOM, an error or a timeout
// is that point's recorded outcome, not the run's; results so far survive in OUT.partial
// and a second run resumes from it (ok/oom points skipped, failed ones run again; --fresh
// ignores it); the matrix expands in order, with per-profile values and bundled options.
// ctest tier: cli
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/io/file_lock.h"
#include "experiments/launch/child_process.h"
#include "experiments/runner/experiment_runner.h"
#include "experiments/runner/matrix.h"
#include "experiments/runner/registry.h"
#include "tests/temp_dir_util.h"

using namespace oomlab;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
// The test driver: counts outcomes; refuses to summarise while OOMLAB_TEST_REFUSE_SUMMARY is set.
json summarize_test(const json& spec, json& points) {
  OOMLAB_CHECK(std::getenv("OOMLAB_TEST_REFUSE_SUMMARY") == nullptr, "refused on purpose");
  json counts = json::object();
  for (const json& p : points)
    counts[p["outcome"]["status"].get<std::string>()] = counts.value(p["outcome"]["status"].get<std::string>(), 0) + 1;
  return {{"outcomes", counts}, {"profile", spec["profile"]}};
}
json verdict_test(const json&, const json& summary) {
  return {{"status", "depends"}, {"reason", "outcomes " + summary["outcomes"].dump()}};
}
OOMLAB_REGISTER_EXPERIMENT({"90_runner_test", summarize_test, verdict_test, {"extra"}, {}});

// Three estimate points: ok, out of memory (a 1 MiB card), error (an input VGG cannot take).
const char* kSpec = R"({
  "name": "90_runner_test", "device": "meta", "extra": "driver key",
  "matrix": {"name": "est", "command": "estimate", "options": {"batch": {"quick": 2, "full": 4}},
             "axes": [{"name": "case", "values": [
               {"label": "fits", "model": "resnet20"},
               {"label": "oom", "model": "resnet50", "device-memory": "1MiB"},
               {"label": "bad", "model": "vgg16", "input": "3,8,8"}]}]}
})";

RunOptions options(const std::string& out) {
  RunOptions o;
  o.out = out;
  o.executable = std::string(OOMLAB_BINARY_DIR) + "/oomlab";
  o.quiet = true;
  return o;
}

std::string write_spec(const TempDir& t, const std::string& spec) {
  fs::create_directories(t.path + "/90_runner_test");
  std::ofstream(t.path + "/90_runner_test/experiment.json") << spec;
  return t.path + "/90_runner_test";
}
}  // namespace

TEST(MatrixRunner, EachPointsOutcomeIsRecordedNotTheRuns) {
  TempDir t;
  const std::string out = t.path + "/r.json";
  run_experiment(write_spec(t, kSpec), options(out));
  const json r = json::parse(std::ifstream(out));
  ASSERT_EQ(r["points"].size(), 3u);
  EXPECT_EQ(r["points"][0]["name"], "est fits");
  EXPECT_EQ(r["points"][0]["outcome"]["status"], "ok");
  EXPECT_EQ(r["points"][0]["metrics"]["model"], "resnet20");
  EXPECT_EQ(r["points"][0]["metrics"]["batch"], 2);   // the quick profile's value
  EXPECT_TRUE(r["points"][0]["memory"]["devices"].contains("meta:0"));
  EXPECT_EQ(r["points"][1]["outcome"]["status"], "oom");
  EXPECT_NE(r["points"][1]["outcome"]["message"].get<std::string>().find("out of memory"), std::string::npos);
  EXPECT_EQ(r["points"][2]["outcome"]["status"], "error");
  EXPECT_EQ(r["points"][2]["outcome"]["exit_code"], 2);
  EXPECT_NE(r["points"][2]["outcome"]["message"].get<std::string>().find("vgg16"), std::string::npos);
  EXPECT_EQ(r["summary"]["outcomes"], json({{"ok", 1}, {"oom", 1}, {"error", 1}}));
  EXPECT_EQ(r["runner"]["outcomes"], json({{"ok", 1}, {"oom", 1}, {"error", 1}}));
  EXPECT_EQ(r["points"][0]["args"], json({"estimate", "--batch", "2", "--model", "resnet20"}));
  EXPECT_FALSE(fs::exists(out + ".partial"));
}

// Two runs on one results file would interleave their points in OUT.partial: while one holds
// OUT.lock a second is one IoError naming the holder, and writes nothing.
TEST(MatrixRunner, ASecondRunOnTheSameResultsFileIsRefused) {
  TempDir t;
  const std::string dir = write_spec(t, kSpec), out = t.path + "/r.json";
  {
    ExclusiveFileLock other_run(out + ".lock", "the other run");
    try {
      run_experiment(dir, options(out));
      ADD_FAILURE() << "a second run on a locked results file ran";
    } catch (const IoError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("is being written by another process (pid " + std::to_string(getpid())), std::string::npos) << m;
    }
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out + ".partial"));
  }
  EXPECT_FALSE(fs::exists(out + ".lock"));   // the holder removes its lock file
  run_experiment(dir, options(out));          // free again
  EXPECT_TRUE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".lock"));
}

// A lock file left by a holder that died (no flock on it) blocks nothing.
TEST(MatrixRunner, AStaleLockFileDoesNotBlock) {
  TempDir t;
  const std::string out = t.path + "/r.json";
  std::ofstream(out + ".lock") << "12345\n";
  run_experiment(write_spec(t, kSpec), options(out));
  EXPECT_TRUE(fs::exists(out));
}

TEST(MatrixRunner, ResumesFromThePartialFileSkippingFinishedPoints) {
  TempDir t;
  const std::string dir = write_spec(t, kSpec), out = t.path + "/r.json";
  ::setenv("OOMLAB_TEST_REFUSE_SUMMARY", "1", 1);
  EXPECT_THROW(run_experiment(dir, options(out)), ValueError);
  ::unsetenv("OOMLAB_TEST_REFUSE_SUMMARY");
  EXPECT_FALSE(fs::exists(out));
  ASSERT_TRUE(fs::exists(out + ".partial"));
  EXPECT_EQ(json::parse(std::ifstream(out + ".partial"))["points"].size(), 3u);
  run_experiment(dir, options(out));
  json r = json::parse(std::ifstream(out));
  EXPECT_EQ(r["runner"]["resumed"], 2);   // ok and oom are kept
  EXPECT_EQ(r["runner"]["ran"], 1);       // the error runs again
  EXPECT_FALSE(fs::exists(out + ".partial"));
  // A partial file from another build (commit, tree state or machine) is run again.
  ::setenv("OOMLAB_TEST_REFUSE_SUMMARY", "1", 1);
  EXPECT_THROW(run_experiment(dir, options(out)), ValueError);
  ::unsetenv("OOMLAB_TEST_REFUSE_SUMMARY");
  json other = json::parse(std::ifstream(out + ".partial"));
  other["build"]["git_sha"] = "0123456789ab";
  std::ofstream(out + ".partial") << other.dump();
  run_experiment(dir, options(out));
  EXPECT_EQ(json::parse(std::ifstream(out))["runner"]["ran"], 3);
  // --fresh ignores a partial file; another profile (or spec) never reuses it.
  ::setenv("OOMLAB_TEST_REFUSE_SUMMARY", "1", 1);
  EXPECT_THROW(run_experiment(dir, options(out)), ValueError);
  ::unsetenv("OOMLAB_TEST_REFUSE_SUMMARY");
  RunOptions fresh = options(out);
  fresh.fresh = true;
  run_experiment(dir, fresh);
  EXPECT_EQ(json::parse(std::ifstream(out))["runner"]["ran"], 3);
  ::setenv("OOMLAB_TEST_REFUSE_SUMMARY", "1", 1);
  EXPECT_THROW(run_experiment(dir, options(out)), ValueError);
  ::unsetenv("OOMLAB_TEST_REFUSE_SUMMARY");
  RunOptions full = options(out);
  full.profile = "full";
  run_experiment(dir, full);
  r = json::parse(std::ifstream(out));
  EXPECT_EQ(r["runner"]["ran"], 3);
  EXPECT_EQ(r["points"][0]["metrics"]["batch"], 4);
}

TEST(MatrixRunner, APointPastItsTimeoutIsStoppedAndRecorded) {
  TempDir t;
  const std::string dir = write_spec(t, R"({"name": "90_runner_test", "device": "cpu", "matrix": {"command": "train",
      "options": {"model": "resnet20", "dataset": "synthetic", "input": "1,28,28", "steps": 100000, "quiet": true}}})");
  RunOptions o = options(t.path + "/r.json");
  o.point_timeout_s = 1.0;
  run_experiment(dir, o);
  const json r = json::parse(std::ifstream(t.path + "/r.json"));
  ASSERT_EQ(r["points"].size(), 1u);
  EXPECT_EQ(r["points"][0]["outcome"]["status"], "timeout");
  EXPECT_LT(r["points"][0]["outcome"]["seconds"].get<double>(), 30.0);
  EXPECT_EQ(r["points"][0]["args"], json({"train", "--dataset", "synthetic", "--input", "1,28,28", "--model",
                                          "resnet20", "--quiet", "--steps", "100000", "--device", "cpu"}));
}

TEST(MatrixRunner, ExpansionOrderProfilesAndBundles) {
  const json spec = json::parse(R"({"name": "x", "device": "meta", "matrix": [
      {"command": "estimate", "options": {"optimizer": "adam"},
       "axes": [{"name": "model", "values": ["mlp", {"label": "r20", "model": "resnet20", "input": [1, 28, 28]}]},
                {"name": "batch", "values": {"quick": [1, 2], "full": [8]}}]},
      {"name": "sum", "command": "summary", "options": {"model": "mlp"}}]})");
  const std::vector<PointSpec> q = expand_matrix(spec, "quick", {}, "spec");
  ASSERT_EQ(q.size(), 5u);
  EXPECT_EQ(q[0].name, "estimate model=mlp batch=1");
  EXPECT_EQ(q[1].name, "estimate model=mlp batch=2");
  EXPECT_EQ(q[2].name, "estimate r20 batch=1");
  EXPECT_EQ(q[4].name, "sum");
  EXPECT_EQ(q[2].args(), (std::vector<std::string>{"estimate", "--optimizer", "adam", "--input", "1,28,28", "--model",
                                                    "resnet20", "--batch", "1"}));
  EXPECT_EQ(q[2].axes, json({{"model", "r20"}, {"batch", 1}}));
  EXPECT_EQ(expand_matrix(spec, "full", {}, "spec").size(), 3u);
  EXPECT_THROW(
      expand_matrix(json::parse(R"({"name": "x", "matrix": {"command": "estimate"}, "extra": 1})"), "quick", {}, "s"),
      ValueError);
  EXPECT_NO_THROW(expand_matrix(json::parse(R"({"name": "x", "matrix": {"command": "estimate"}, "extra": 1})"), "quick",
                                {"extra"}, "s"));
}

// A matrix of 10^10 points is refused before any point is made (not expanded in memory).
TEST(MatrixRunner, AHugeMatrixIsRefusedBeforeItExpands) {
  json values = json::array();
  for (int i = 1; i <= 100; ++i) values.push_back(i);
  json axes = json::array();
  for (const char* name : {"batch", "seed", "steps", "classes", "lr"})
    axes.push_back({{"name", name}, {"values", values}});
  const json spec = {{"name", "x"}, {"matrix", {{"command", "train"}, {"axes", axes}}}};
  try {
    expand_matrix(spec, "quick", {}, "spec");
    FAIL() << "expanded";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("expands to more than 100000 points (axis 'steps'"), std::string::npos)
        << e.what();
  }
}

// The child's output reaches the runner line by line (a training point's progress), and a
// child that cannot even start is an error outcome, not an exception.
TEST(MatrixRunner, ChildOutputLinesAndStartFailures) {
  TempDir t;
  std::vector<std::string> lines;
  ChildOutcome ok = run_child(std::string(OOMLAB_BINARY_DIR) + "/oomlab", {"models"}, 30, t.path + "/models.log",
                              [&](const std::string& line) { lines.push_back(line); });
  EXPECT_EQ(ok.status, "ok");
  EXPECT_NE(std::find(lines.begin(), lines.end(), "resnet20"), lines.end());
  EXPECT_NE(std::find(lines.begin(), lines.end(), "bert-base"), lines.end());
  ChildOutcome bad = run_child(t.path + "/no_such_binary", {"models"}, 30, t.path + "/bad.log");
  EXPECT_EQ(bad.status, "error");
  EXPECT_EQ(bad.exit_code, 127);
  EXPECT_NE(bad.message.find("exec"), std::string::npos) << bad.message;
}

// A signal to the whole process group (Ctrl-C; `timeout` when a GPU lease's budget ends) can
// end the point before the runner's loop sees its own flag: the point is then interrupted,
// never recorded as a crash (the kit's cut partial once held such a "crash" point).
TEST(MatrixRunner, AGroupSignalThatEndsThePointFirstIsAnInterruptNotACrash) {
  TempDir t;
  for (int i = 0; i < 5; ++i) {   // the child dies in the runner's poll sleep: the racy order
    InterruptGuard guard;
    EXPECT_THROW(run_child("/bin/sh", {"-c", "kill -TERM $PPID; kill -TERM $$; sleep 5"}, 30, t.path + "/sh.log"),
                 Interrupted);
    EXPECT_EQ(interrupt_signal(), SIGTERM);
  }
}
