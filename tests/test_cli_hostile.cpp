// test_cli_hostile.cpp — the third probe's reproducers (issue 29), each against the built
// binary: sizes past the documented limits, commands that must check their arguments, rank
// variables that contradict each other, outputs through /dev/stdout, links and FIFOs, input
// FIFOs, step-N folders the run did not write, rendezvous that must end within --timeout,
// an unresolvable master, the skip policy when no batch fits, and a file given where a
// directory belongs. Every case ends with the documented exit code and message, no signal,
// within its bound, and nothing lost.
// ctest tier: cli
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/parallel/tcp_store.h"
#include "tests/cli_test_util.h"

namespace fs = std::filesystem;

namespace {
fs::path tmp(const std::string& name) {
  return fs::temp_directory_path() / ("oomlab_hostile_" + name + "_" + std::to_string(::getpid()));
}

// Ports for the rendezvous cases: nobody listens there (a range apart from the other rank tests').
int free_port() { return 29700 + int(::getpid() % 200) * 3; }

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

bool has_gloo() {
  return run_oomlab("allreduce-bench --backend gloo --help").code == 0 &&
         run_oomlab("allreduce-bench --backend gloo --ranks 1 --max-bytes 8 --iters 1 --warmup 0").output.find(
             "not in this build") == std::string::npos;
}
}  // namespace

struct HostileCase {
  const char* env; const char* args; int code; const char* expected;
  friend void PrintTo(const HostileCase& c, std::ostream* os) { *os << c.env << " oomlab " << c.args; }
};

class CliHostile : public ::testing::TestWithParam<HostileCase> {};

TEST_P(CliHostile, ExitCodeAndMessage) {
  const HostileCase& c = GetParam();
  const CliRun r = run_oomlab(c.args, c.env);
  EXPECT_EQ(r.code, c.code) << r.output;
  EXPECT_EQ(r.signal, 0) << r.output;
  EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Causes, CliHostile,
    ::testing::Values(
        // 1: sizes have documented limits (and the autograd graph is freed iteratively at any depth).
        HostileCase{"",
                    "train --model bert-tiny --dataset synthetic-seq --steps 1 --batch 2 --synthetic-size 4 "
                    "--device meta --layers 100000",
                    2, "--layers must be in 1..1024 (got 100000)"},
        HostileCase{"", "summary --model unet-small --depth 17", 2, "--depth must be in 1..16 (got 17)"},
        // 2, 3: every command checks its arguments.
        HostileCase{"", "models --bogus", 2, "--bogus"},
        HostileCase{"", "summary --model resnet20 --classes -5", 2, "--classes"},
        HostileCase{"", "estimate --model resnet20 --classes 0", 2, "--classes"},
        // 4: rank variables and flags that would be ignored or contradict each other.
        HostileCase{"RANK=0 WORLD_SIZE=1 LOCAL_RANK=7 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555",
                    "allreduce-bench --backend gloo --max-bytes 1K --iters 2", 2,
                    "LOCAL_RANK=7 is not below WORLD_SIZE=1"},
        HostileCase{"", "allreduce-bench --backend local --rank 0 --world-size 1 --max-bytes 1K --iters 2", 2,
                    "--rank applies to --backend"},
        HostileCase{"", "allreduce-bench --master-port 29555 --max-bytes 1K --iters 2", 2,
                    "--master-port applies to --backend"},
        HostileCase{"", "allreduce-bench --backend bogus --max-bytes 1K --iters 2", 2,
                    "--backend must be local, gloo, mpi or nccl (got 'bogus')"},
        // a rank past int's range is refused as given, never narrowed to another rank (2^32 was rank 0)
        HostileCase{"", "allreduce-bench --backend gloo --rank 4294967296 --world-size 1 --max-bytes 1K --iters 2", 2,
                    "--rank must be in 0..1048575 (got 4294967296)"},
        HostileCase{"", "allreduce-bench --backend gloo --rank 0 --world-size 9223372036854775807 --max-bytes 1K", 2,
                    "--world-size must be in 1..1048576 (got 9223372036854775807)"},
        // 10: the skip policy gives up when no batch fits.
        HostileCase{"",
                    "train --model resnet20 --dataset synthetic --batch 8 --synthetic-size 64 --steps 2 --device meta "
                    "--on-oom skip --device-memory 3MiB",
                    3, "batches in a row ran out of memory"}));

// 5: /dev/stdout (through a link of our own, so that a regression cannot replace the
// machine's /dev/stdout) is written through the descriptor: after the table, in the file
// stdout is redirected to; the link stays a link. A link to a regular file writes its target.
TEST(CliHostileOutputs, DevStdoutAndLinksWriteThroughNotOver) {
  const fs::path dir = tmp("links");
  fs::create_directories(dir);
  fs::create_symlink("/dev/stdout", dir / "out");
  const CliRun r = run_oomlab("estimate --model mlp --batch 2 --json " + (dir / "out").string() + " > " +
                              (dir / "captured.txt").string());
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(dir / "out"));
  const std::string captured = slurp(dir / "captured.txt");
  const size_t brace = captured.find("{\n");
  ASSERT_NE(brace, std::string::npos) << captured;
  EXPECT_NE(captured.find("PEAK allocated"), std::string::npos) << "the table before the JSON:\n" << captured;
  const size_t end = captured.rfind("\n}\n");   // the JSON's last line ("wrote ..." may follow)
  ASSERT_NE(end, std::string::npos) << captured;
  EXPECT_EQ(nlohmann::json::parse(captured.substr(brace, end + 3 - brace))["command"], "estimate");

  fs::create_symlink("real.json", dir / "link.json");
  const CliRun s = run_oomlab("summary --model mlp --json " + (dir / "link.json").string());
  EXPECT_EQ(s.code, 0) << s.output;
  EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "real.json"))["command"], "summary");
  fs::remove_all(dir);
}

// 7: a FIFO output with a reader waiting gets the JSON (the up-front check does not open it);
// a FIFO as an input file is an error at once, never a blocked open.
TEST(CliHostileOutputs, FifosNeverHang) {
  const fs::path dir = tmp("fifo");
  fs::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir / "pipe").c_str(), 0600), 0);
  const CliRun r = run_oomlab("summary --model mlp --json " + (dir / "pipe").string() + "; wait",
                              "timeout 60 cat " + (dir / "pipe").string() + " > " + (dir / "got.json").string() + " &");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(slurp(dir / "got.json"))["command"], "summary");

  fs::create_directories(dir / "npy");
  ASSERT_EQ(::mkfifo((dir / "npy" / "train_inputs.npy").c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const CliRun n = run_oomlab(
      "train --model mlp --dataset npy --data-dir " + (dir / "npy").string() + " --classes 10 --steps 1", "timeout 60");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  EXPECT_EQ(n.code, 2) << n.output;
  EXPECT_NE(n.output.find("is a FIFO, not a regular file"), std::string::npos) << n.output;
  fs::remove_all(dir);
}

// 6: a step-N folder the run did not write is never replaced: the run fails before training.
TEST(CliHostileOutputs, ForeignStepFolderIsKept) {
  const fs::path dir = tmp("foreign");
  fs::create_directories(dir / "step-2");
  { std::ofstream(dir / "step-2" / "notes.txt") << "x\n"; }
  const CliRun r = run_oomlab("train --model resnet20 --dataset synthetic --batch 8 --synthetic-size 64 --steps 4 "
                              "--device meta --save-every 2 --save " + dir.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("step-2: it exists and this run did not write it"), std::string::npos) << r.output;
  EXPECT_EQ(slurp(dir / "step-2" / "notes.txt"), "x\n");
  EXPECT_EQ(r.output.find("step 1/"), std::string::npos) << "refused before training:\n" << r.output;
  fs::remove_all(dir);
}

// 8, 9: rendezvous bounded by --timeout: a missing peer, a missing master, an unresolvable
// master, a port taken, another job's store; a typed error (exit 2) naming what was waited
// for, never a signal.
TEST(CliHostileRanks, RendezvousEndsWithinTheTimeout) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  struct Case { std::string env; const char* expected; };
  const int port = free_port();
  const Case cases[] = {
      {"RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port), "did not arrive"},
      {"RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port + 1), "is rank 0 running?"},
      {"RANK=0 WORLD_SIZE=2 MASTER_ADDR=host.invalid MASTER_PORT=" + std::to_string(port + 2),
       "cannot resolve host.invalid"},
      // The port in use: another rank 0 serves it (and waits for its own peer) meanwhile.
      {"(env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port + 3) + " " + oomlab_path() +
           " allreduce-bench --backend gloo --timeout 6 --max-bytes 1K >/dev/null 2>&1 &); sleep 2; "
           "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
           std::to_string(port + 3),
       "cannot listen on port"},
      // A second job's rank on that port: refused by the first job's store, naming both jobs.
      {"(env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port + 4) + " " + oomlab_path() +
           " allreduce-bench --backend gloo --timeout 6 --max-bytes 1K >/dev/null 2>&1 &); sleep 2; "
           "RANK=1 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
           std::to_string(port + 4),
       "serves another job (world size 2; this rank's: world size 3)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.env);
    const auto t0 = std::chrono::steady_clock::now();
    const size_t last = c.env.rfind("; ");   // the command's own variables follow the last "; "
    const std::string env = last == std::string::npos
                                ? "timeout 120 env " + c.env
                                : c.env.substr(0, last + 2) + "timeout 120 env " + c.env.substr(last + 2);
    const CliRun r = run_oomlab("allreduce-bench --backend gloo --timeout 2 --max-bytes 1K --iters 2", env);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(took, 30.0) << r.output;
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_EQ(r.signal, 0) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
  }
}

// Starts `oomlab allreduce-bench` as gloo rank `rank` of 2 (output to `log`); its pid.
pid_t start_gloo_rank(int rank, int port, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("RANK", std::to_string(rank).c_str(), 1);
    ::setenv("WORLD_SIZE", "2", 1);
    ::setenv("MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    if (!std::freopen(log.c_str(), "w", stdout) || !std::freopen(log.c_str(), "a", stderr)) ::_exit(126);
    const std::string bin = oomlab_path();
    ::execl(bin.c_str(), bin.c_str(), "allreduce-bench", "--backend", "gloo", "--timeout", "3", "--max-bytes", "64M",
            "--iters", "50", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// 8, a peer that dies mid-rendezvous: rank 1 is killed the moment its gloo address appears
// in rank 0's store (this test watches the store as one more client). Rank 0 ends within its
// timeout with a typed error naming itself (exit 2, no signal): when the kill lands before
// their pair connected (about 3 rounds in 8 here), "could not connect ... within 3 s" after 3 s,
// where gloo used to wait 5x the timeout (15 s); otherwise the first collective fails at once.
TEST(CliHostileRanks, APeerKilledMidRendezvousEndsRankZeroWithinTheTimeout) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int port = 28100 + int(::getpid() % 300) + 300 * round;
    const fs::path log0 = tmp("rank0.log"), log1 = tmp("rank1.log");
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t rank0 = start_gloo_rank(0, port, log0), rank1 = start_gloo_rank(1, port, log1);
    ASSERT_GT(rank0, 0);
    ASSERT_GT(rank1, 0);
    {
      oomlab::TcpStore watcher("127.0.0.1", port, false, std::chrono::seconds(20), "world size 2");   // their job
      watcher.get("gloo/1");   // rank 1 has published its address
      ::kill(rank1, SIGKILL);
    }
    int status = 0;
    ::waitpid(rank1, &status, 0);
    ASSERT_EQ(::waitpid(rank0, &status, 0), rank0);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string out = slurp(log0);
    EXPECT_LT(took, 10.0) << out;   // start-up + at most one 3 s wait, not 15
    ASSERT_TRUE(WIFEXITED(status)) << "rank 0 ended by signal " << WTERMSIG(status) << "\n" << out;
    EXPECT_EQ(WEXITSTATUS(status), 2) << out;
    EXPECT_NE(out.find("gloo: rank 0"), std::string::npos) << out;
    fs::remove(log0);
    fs::remove(log1);
  }
}

// `train --parallel ddp` under a launcher: its --timeout bounds the rendezvous too.
TEST(CliHostileRanks, TrainRendezvousEndsWithinTheTimeout) {
  if (!has_gloo()) GTEST_SKIP() << "this build has no gloo backend";
  const auto t0 = std::chrono::steady_clock::now();
  const CliRun r = run_oomlab("train --model mlp --dataset synthetic --synthetic-size 64 --batch 8 --steps 1 --quiet "
                              "--parallel ddp --backend gloo --timeout 2",
                              "timeout 120 env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                                  std::to_string(free_port()));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0) << r.output;
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("did not arrive"), std::string::npos) << r.output;
  const CliRun bad = run_oomlab("train --model mlp --dataset synthetic --steps 1 --timeout 2");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--timeout applies to --parallel ddp"), std::string::npos) << bad.output;
}

// A table that cannot be written (stdout on a full device) fails the command.
TEST(CliHostileOutputs, StdoutWriteErrorsAreErrors) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  const fs::path err = tmp("full.err");
  const int status = std::system((oomlab_path() + " summary --model mlp > /dev/full 2> " + err.string()).c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(slurp(err).find("cannot write to standard output"), std::string::npos) << slurp(err);
  fs::remove(err);
}

// A checkpoint past the run's last step would train nothing: an error, not a silent exit 0.
TEST(CliHostileOutputs, ResumePastTheLastStepIsAnError) {
  const fs::path dir = tmp("past");
  const std::string tiny =
      "train --model mlp --dataset synthetic --synthetic-size 64 --batch 16 --eval-batches 1 --quiet ";
  ASSERT_EQ(run_oomlab(tiny + "--steps 2 --save " + dir.string()).code, 0);
  const CliRun r = run_oomlab(tiny + "--steps 1 --resume " + dir.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("is at step 2, past this run's last step 1"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// A file where a directory is expected is named as such: --json under it, --resume of it.
TEST(CliHostileOutputs, AFileWhereADirectoryIsExpectedIsNamed) {
  const fs::path dir = tmp("file_as_dir");
  fs::create_directories(dir);
  const std::string f = (dir / "plain").string();
  std::ofstream(f) << "not a directory\n";
  CliRun r = run_oomlab("estimate --model mlp --batch 2 --json " + f + "/out.json");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(f + " is not a directory"), std::string::npos) << r.output;
  r = run_oomlab("train --model tiny-ff --dataset synthetic --steps 1 --device meta --resume " + f);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(f + " is a file, not a checkpoint directory"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(f + "/out.json"));
}
