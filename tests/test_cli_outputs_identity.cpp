// test_cli_outputs_identity.cpp — outputs and experiments keep their identity: two output
// flags naming one file, or an output naming a file an input flag reads (--init, --model
// graph:FILE, --data-dir's npy files; run's --out naming the experiment's own spec), are an error before any work
// (nothing written, the input kept); `oomlab run` refuses
// a spec whose name is not its folder's (no other experiment's results overwritten); a
// TMPDIR that is not a folder is one exit-2 line; `oomlab run` killed with -9 leaves no point
// running and its scratch folder goes at the next run; a JSON written to standard output is
// never followed by a "wrote" line.
// ctest tier: cli
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tests/cli_test_util.h"

namespace fs = std::filesystem;

namespace {
fs::path tmp(const std::string& name) {
  return fs::temp_directory_path() / ("oomlab_identity_" + name + "_" + std::to_string(::getpid()));
}

TEST(CliOutputs, TwoFlagsNamingOneFileFailBeforeAnyWork) {
  const fs::path dir = tmp("same");
  fs::create_directories(dir);
  const std::string out = (dir / "out.json").string();
  for (const std::string& second :
       {out, (dir / "." / "out.json").string(), dir.string() + "/../" + dir.filename().string() + "/out.json"}) {
    const CliRun r = run_oomlab("estimate --model mlp --batch 2 --json " + out + " --chrome-trace " + second);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(r.output, "oomlab: error: --json and --chrome-trace name the same file " + out +
                            ": each output needs its own (one would replace the other)\n");
    EXPECT_FALSE(fs::exists(out)) << "wrote before the check";
  }
  // A link to the file is the same file too.
  { std::ofstream(out) << "{}\n"; }
  fs::create_symlink(out, dir / "link.json");
  const CliRun r =
      run_oomlab("estimate --model mlp --batch 2 --json " + out + " --memory-snapshot " + (dir / "link.json").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--json and --memory-snapshot name the same file"), std::string::npos) << r.output;
  EXPECT_EQ(run_oomlab("estimate --model mlp --batch 2 --json /dev/null --chrome-trace /dev/null").code, 0);
  fs::remove_all(dir);
}

std::string slurp_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

TEST(CliOutputs, AnOutputNamingAnInputFailsBeforeAnyWork) {
  const fs::path dir = tmp("input");
  fs::create_directories(dir);
  const std::string w = (dir / "w.safetensors").string(), g = (dir / "g.json").string();
  { std::ofstream(w) << "my weights"; }
  { std::ofstream(g) << "my graph"; }
  const std::string idx = (dir / "t10k-labels-idx1-ubyte.gz").string();
  { std::ofstream(idx) << "my labels"; }
  const struct { std::string args, message; } cases[] = {
      {"train --model mlp --dataset synthetic --steps 1 --device cpu --quiet --init " + w + " --json " + w,
       "--json names " + w + ", a file --init reads"},
      {"step --model mlp --data-dir " + dir.string() + " --init " + w + " --out " + dir.string() + "/./w.safetensors",
       "--out names " + dir.string() + "/./w.safetensors, a file --init reads"},
      {"summary --model graph:" + g + " --json " + g, "--json names " + g + ", a file --model reads"},
      {"plan --model graph:" + g + " --gpu t4 --global-batch 8 --json " + g,
       "--json names " + g + ", a file --model reads"},
      {"train --model mlp --dataset npy --data-dir " + dir.string() + " --steps 1 --json " + dir.string() +
           "/train_labels.npy",
       "--json names " + dir.string() + "/train_labels.npy, a file --data-dir reads"},
      {"train --model mlp --dataset fashion-mnist --data-dir " + dir.string() + " --steps 1 --json " + idx,
       "--json names " + idx + ", a file --data-dir reads"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    const CliRun r = run_oomlab(c.args);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("oomlab: error: " + c.message + ": writing it would replace your input"),
              std::string::npos) << r.output;
  }
  EXPECT_EQ(slurp_file(w), "my weights");
  EXPECT_EQ(slurp_file(g), "my graph");
  EXPECT_EQ(slurp_file(idx), "my labels");
  // run --out naming the experiment's own spec
  const fs::path exp = dir / "experiments" / "02_memory_vs_batch";
  fs::create_directories(exp.parent_path());
  fs::copy(fs::path(OOMLAB_SOURCE_DIR) / "experiments" / "02_memory_vs_batch", exp, fs::copy_options::recursive);
  const std::string spec = slurp_file(exp / "experiment.json");
  const CliRun r = run_oomlab("run " + exp.string() + " --device meta --out " + (exp / "experiment.json").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("the experiment's own experiment.json: the results would replace it"), std::string::npos)
      << r.output;
  EXPECT_EQ(slurp_file(exp / "experiment.json"), spec);
  fs::remove_all(dir);
}

TEST(CliOutputs, JsonOnStandardOutputIsNotFollowedByWrote) {
  const CliRun r = run_oomlab("summary --model mlp --json /dev/stdout");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("wrote"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.substr(r.output.size() - 2), "}\n");
}

TEST(CliRun, ASpecNamedOtherThanItsFolderIsRefused) {
  const fs::path root = tmp("copy");
  fs::create_directories(root / "experiments");
  fs::copy(fs::path(OOMLAB_SOURCE_DIR) / "experiments" / "01_vgg16_memory", root / "experiments" / "99_copy",
           fs::copy_options::recursive);
  const CliRun r = run_oomlab("run " + (root / "experiments" / "99_copy").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("\"name\" is '01_vgg16_memory' but the folder is '99_copy': an experiment's name is its "
                          "folder's"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(root / "reports")) << "wrote results";
  fs::remove_all(root);
}

TEST(CliRun, ATmpdirThatIsNotAFolderIsOneLine) {
  const std::string out = tmp("tmpdir").string() + ".json";
  const CliRun r = run_oomlab("run " + std::string(OOMLAB_SOURCE_DIR) + "/experiments/01_vgg16_memory --out " + out,
                              "TMPDIR=/nonexistent/oomlab");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("oomlab: error: oomlab run: TMPDIR=/nonexistent/oomlab is not a folder"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

// Processes whose command line mentions `marker` (the run's own TMPDIR), from /proc.
int processes_mentioning(const std::string& marker) {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid == std::to_string(::getpid())) continue;
    std::ifstream f(e.path() / "cmdline", std::ios::binary);
    const std::string cmd((std::istreambuf_iterator<char>(f)), {});
    n += cmd.find(marker) != std::string::npos && cmd.find("oomlab") != std::string::npos;
  }
  return n;
}

TEST(CliRun, KilledWithSigkillLeavesNoPointAndNoFolder) {
  const fs::path scratch = tmp("kill");
  fs::create_directories(scratch);
  const std::string out = (scratch / "r.json").string();
  // A training point that runs for minutes; the run is killed while it does.
  const std::string run = "TMPDIR=" + scratch.string() + " " + oomlab_path() + " run " + OOMLAB_SOURCE_DIR +
                          "/experiments/03_resnet20_fashion_mnist --out " + out + " >/dev/null 2>&1 & echo $!";
  FILE* p = ::popen(run.c_str(), "r");
  ASSERT_NE(p, nullptr);
  long run_pid = 0;
  ASSERT_EQ(std::fscanf(p, "%ld", &run_pid), 1);
  ::pclose(p);
  bool point_started = false;
  for (int i = 0; i < 200 && !point_started; ++i) {   // up to 20 s for the point to start
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    point_started = processes_mentioning(scratch.string() + "/oomlab_run_") > 0;
  }
  ASSERT_TRUE(point_started);
  ASSERT_EQ(::kill(pid_t(run_pid), SIGKILL), 0);
  int left = 1;
  for (int i = 0; i < 50 && left; ++i) {   // the point gets SIGKILL as its parent dies
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    left = processes_mentioning(scratch.string());
  }
  EXPECT_EQ(left, 0) << "a point outlived the run";
  // The dead run's scratch folder is removed by the next run.
  const CliRun next = run_oomlab("run " + std::string(OOMLAB_SOURCE_DIR) + "/experiments/01_vgg16_memory --out " + out,
                                 "TMPDIR=" + scratch.string());
  EXPECT_EQ(next.code, 0) << next.output;
  for (const auto& e : fs::directory_iterator(scratch))
    EXPECT_NE(e.path().filename().string().rfind("oomlab_run_", 0), 0u) << "left " << e.path();
  fs::remove_all(scratch);
}
}  // namespace
