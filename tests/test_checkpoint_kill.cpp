// test_checkpoint_kill.cpp — a training run killed (SIGKILL) at every point where it
// publishes or removes a checkpoint resumes and ends with the weights of a run that was never
// killed, bit for bit (engine/train/checkpoint.h). The kill is real: strace's syscall
// injection sends SIGKILL at the K-th rename (a temp file or folder published, `latest`
// moved) or the K-th unlink/rmdir (retention), for every K until the run survives; the
// restart is the documented one (the same command with --resume DIR when DIR holds a complete
// checkpoint). Afterwards no temp folder of the killed process is left and `latest` names the
// last step. Skipped where strace is missing or cannot trace (no ptrace).
// ctest tier: cli
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli_test_util.h"

namespace fs = std::filesystem;

namespace {
constexpr const char* kRun = "train --model mlp --dataset synthetic --synthetic-size 64 --batch 16 --eval-batches 1 "
                             "--quiet --steps 6 --save-every 2";

fs::path tmp(const std::string& name) {
  return fs::temp_directory_path() / ("oomlab_kill_" + name + "_" + std::to_string(::getpid()));
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

bool strace_works() {
  return std::system("strace -qq -o /dev/null -e trace=none true >/dev/null 2>&1") == 0;
}

bool has_complete_checkpoint(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().rfind("step-", 0) == 0 && fs::exists(e.path() / "trainer_state.json")) return true;
  return false;
}

// Kills the run at the K-th call of `syscalls` for K = 1, 2, ... until it survives; after each
// kill, restarts it and checks the end state against an uninterrupted run's.
void kill_at_every(const std::string& syscalls, const std::string& reference_weights) {
  int kills = 0;
  for (int k = 1; k <= 80; ++k) {
    const fs::path dir = tmp("k" + std::to_string(k));
    fs::remove_all(dir);
    const std::string save = " --save " + dir.string();
    // Under ASan, LeakSanitizer cannot stop the threads of a traced process (its report at
    // exit is then spurious): leak checking is off for the traced run only.
    const std::string strace =
        "ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 strace -qq -o /dev/null -e trace=" + syscalls +
        " -e inject=" + syscalls + ":signal=KILL:when=" + std::to_string(k);
    const CliRun killed = run_oomlab(kRun + save, strace);
    if (killed.code == 0) {   // fewer than k such calls: every point was covered
      EXPECT_GT(kills, 0) << syscalls << ": the run never reached one of them";
      fs::remove_all(dir);
      return;
    }
    ++kills;
    ASSERT_EQ(killed.signal, 9) << syscalls << " #" << k << ": " << killed.output;
    const std::string resume = has_complete_checkpoint(dir) ? " --resume " + dir.string() : "";
    const CliRun restarted = run_oomlab(kRun + save + resume);
    ASSERT_EQ(restarted.code, 0) << "killed at " << syscalls << " #" << k << ", restarted with" << resume << ":\n"
                                 << restarted.output;
    EXPECT_EQ(slurp(dir / "step-6" / "model.safetensors"), reference_weights) << syscalls << " #" << k;
    EXPECT_EQ(slurp(dir / "latest"), "step-6\n") << syscalls << " #" << k;
    for (const auto& e : fs::directory_iterator(dir))
      EXPECT_NE(e.path().filename().string()[0], '.') << syscalls << " #" << k << ": left " << e.path();
    fs::remove_all(dir);
  }
  ADD_FAILURE() << syscalls << ": still killed after 80 points";
}

class CheckpointKill : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!strace_works()) GTEST_SKIP() << "strace is missing or cannot trace here (scripts/setup.sh installs it)";
    const fs::path dir = tmp("reference");
    fs::remove_all(dir);
    const CliRun r = run_oomlab(std::string(kRun) + " --save " + dir.string());
    ASSERT_EQ(r.code, 0) << r.output;
    reference_ = slurp(dir / "step-6" / "model.safetensors");
    ASSERT_FALSE(reference_.empty());
    fs::remove_all(dir);
  }
  std::string reference_;
};

// Every publication: each file of a checkpoint renamed into its temp folder, the folder
// renamed to step-N, `latest` moved (the kill between the last two left step-N newer than
// `latest`, which a restart once refused as "not written by this run").
TEST_F(CheckpointKill, AtEveryRenameTheRunResumes) { kill_at_every("rename,renameat,renameat2", reference_); }

// Every removal: temp files, retention's deletion of the run's older checkpoints.
TEST_F(CheckpointKill, AtEveryRemovalTheRunResumes) { kill_at_every("unlink,unlinkat,rmdir", reference_); }
}  // namespace
