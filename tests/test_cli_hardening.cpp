// test_cli_hardening.cpp — the oomlab binary against hostile and careless input, one table
// per class of failure: stray words and single-dash typos, sizes that cannot be
// represented (every model at batch 2^31..2^62, huge inputs and epochs), flags that would be
// silently ignored, output locations checked before any work, special files as outputs,
// checkpoint retention in shared folders, divergence (NaN/Inf loss) and resume mismatches.
// Every case: the documented exit code, a message naming what is wrong, never a signal or
// an "internal error", and no output file unless the run succeeded.
// ctest tier: cli
#include <gtest/gtest.h>

#include "tests/cli_test_util.h"
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>

namespace fs = std::filesystem;

namespace {

fs::path tmp(const std::string& name) {
  return fs::temp_directory_path() / ("oomlab_hard_" + name + "_" + std::to_string(::getpid()));
}

std::string models_list() {
  return run_oomlab("models").output;
}

constexpr const char* kTiny = "--model mlp --dataset synthetic --synthetic-size 64 --batch 16 --eval-batches 1 --quiet";
}  // namespace

struct RejectCase {
  const char* args; int code; const char* expected;
  friend void PrintTo(const RejectCase& c, std::ostream* os) { *os << "oomlab " << c.args; }
};

class CliRejects : public ::testing::TestWithParam<RejectCase> {};

TEST_P(CliRejects, ExitCodeMessageAndNoOutput) {
  const fs::path out = tmp("reject.json");
  fs::remove(out);
  const CliRun r = run_oomlab(std::string(GetParam().args) + " --json=" + out.string());
  EXPECT_EQ(r.code, GetParam().code) << r.output;
  EXPECT_EQ(r.signal, 0) << r.output;
  EXPECT_NE(r.output.find(GetParam().expected), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

INSTANTIATE_TEST_SUITE_P(
    StrayWords, CliRejects,
    ::testing::Values(
        RejectCase{"train vgg11 --dataset synthetic --steps 1", 2, "unexpected argument 'vgg11'"},
        RejectCase{"summary --model mlp extra", 2, "unexpected argument 'extra'"},
        RejectCase{"estimate --model mlp --batch 2 -json x.json", 2, "unknown flag '-json'"},
        RejectCase{"train -model mlp", 2, "unknown flag '-model'"},
        RejectCase{"summary --model mlp --batch 2 --batch 4", 2, "--batch is given twice"},
        RejectCase{"train --model mlp --dataset synthetic --log-every --quiet", 2, "--log-every needs a value"},
        RejectCase{"run experiments/01_vgg16_memory experiments/02_memory_vs_batch", 2, "unexpected argument"},
        RejectCase{"run experiments/01_vgg16_memory -fresh", 2, "unknown flag '-fresh'"}));

INSTANTIATE_TEST_SUITE_P(
    Overflow, CliRejects,
    ::testing::Values(
        RejectCase{"summary --model resnet20 --input 4611686018427387904,2,2", 2, "more than 2^63 - 1"},
        RejectCase{"estimate --model resnet50 --batch 1000000000000", 3, "out of memory"},
        RejectCase{"estimate --model bert-base --batch 4611686018427387904", 2, "more than 2^63 - 1"},
        RejectCase{"train --model mlp --dataset synthetic --synthetic-size 64 --batch 16 --device meta "
                   "--epochs 2305843009213693953",
                   2, "more than 2^63 - 1"},
        RejectCase{"train --model bert-mini --dataset synthetic-seq --seq-len 9223372036854775807 --steps 1", 2,
                   "exceeds max_positions"},
        // the synthetic pool (the set plus its test quarter) and the loader's epoch order
        RejectCase{"train --model mlp --dataset synthetic --batch 2 --synthetic-size 9223372036854775807 "
                   "--device meta --steps 1",
                   2, "--synthetic-size plus its test split: 9223372036854775807 + 2305843009213693951 is more than "
                      "2^63 - 1"},
        RejectCase{"train --model bert-tiny --dataset synthetic-seq --batch 2 --synthetic-size 4611686018427387904 "
                   "--device meta --steps 1",
                   2, "DataLoader: the epoch order of synthetic-seq"},
        // the synthetic sets' per-class tables (was: an internal error, vector::_M_default_append); the image
        // set keeps no table past its budget, so the classifier's own shape is what cannot be represented
        RejectCase{"train --model mlp --dataset synthetic --classes 9223372036854775807 --device meta --steps 1", 2,
                   "shape [9223372036854775807, 128] has more than 2^63 - 1 elements"},
        RejectCase{"train --model unet-small --dataset synthetic-seg --classes 4611686018427387904 --device meta "
                   "--steps 1",
                   2, "synthetic-seg: num_classes x channels: 4611686018427387904 x 3 is more than 2^63 - 1"}));

INSTANTIATE_TEST_SUITE_P(
    IgnoredFlags, CliRejects,
    ::testing::Values(
        RejectCase{"train --model mlp --dataset synthetic --optimizer adam --momentum 0.8 --steps 1", 2,
                   "--momentum has no effect with --optimizer adam"},
        RejectCase{"train --model bert-mini --dataset synthetic-seq --momentum 0.8 --steps 1", 2,
                   "--momentum has no effect with --optimizer adamw"},
        RejectCase{"train --model mlp --dataset synthetic --optimizer adam --nesterov --steps 1", 2,
                   "--nesterov applies to --optimizer sgd only"},
        RejectCase{"train --model mlp --dataset synthetic --save-every 5 --steps 1", 2, "--save-every needs --save"},
        RejectCase{"train --model mlp --dataset synthetic --seq-min-len 4 --steps 1", 2,
                   "--seq-min-len applies to --dataset synthetic-seq (this run has --dataset synthetic)"},
        RejectCase{"train --model mlp --data-dir /tmp --dataset synthetic --steps 1", 2,
                   "--data-dir applies to --dataset fashion-mnist or npy (this run has --dataset synthetic)"},
        RejectCase{"train --model mlp --dataset fashion-mnist --synthetic-size 10 --steps 1", 2,
                   "--synthetic-size applies to --dataset synthetic, synthetic-seq or synthetic-seg (this run has "
                   "--dataset fashion-mnist)"},
        RejectCase{"train --model mlp --dataset synthetic --on-nan ignore --steps 1", 2,
                   "--on-nan must be stop or continue"}));

// --parallel: every bad combination is refused before any work (exit 2, no results file).
INSTANTIATE_TEST_SUITE_P(
    DataParallel, CliRejects,
    ::testing::Values(
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --parallel bdp --devices 3 --batch 8 --gpu0-bsz 9",
                   2, "--gpu0-bsz 9 is larger than the 8 samples of a step"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --parallel dp --devices 0", 2,
                   "--devices must be in 1..1024 (got 0)"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --parallel dp --devices 4 --batch 2", 2,
                   "a batch of 2 samples cannot be split over 4 devices"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --parallel ddp --devices 2 --batch 8 --sync-bn", 2,
                   "has no BatchNorm2d layers"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --parallel dp --devices 2 --sync-bn", 2,
                   "--sync-bn applies to --parallel ddp"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --parallel bdp --devices 2", 2,
                   "--parallel bdp needs --gpu0-bsz"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --gpu0-bsz 2", 2,
                   "--gpu0-bsz applies to --parallel bdp"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --devices 2", 2,
                   "--devices 2 needs --parallel dp, bdp, ddp or fsdp"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --parallel zero3", 2,
                   "--parallel must be none, dp, bdp, ddp or fsdp (got 'zero3')"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --parallel ddp --devices 2 --backend tcp", 2,
                   "--backend must be local, gloo, mpi or nccl (got 'tcp')"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --parallel ddp --devices 2 --on-oom skip", 2,
                   "with --parallel ddp is not supported"}));

INSTANTIATE_TEST_SUITE_P(
    OutputsUpFront, CliRejects,
    ::testing::Values(
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --save /proc/oomlab_ckpt", 2,
                   "--save: cannot write /proc/oomlab_ckpt: directory /proc is not writable"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --save /etc/hostname/ck", 2,
                   "--save: cannot create /etc/hostname/ck: /etc/hostname is not a directory"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --save /proc/self", 2, "--save: cannot write"},
        RejectCase{"estimate --model mlp --batch 2 --memory-snapshot /proc/x.json", 2, "is not writable"}));

INSTANTIATE_TEST_SUITE_P(
    CheckpointPolicies, CliRejects,
    ::testing::Values(
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --checkpoint every:0", 2,
                   "every:K needs a whole number K >= 1"},
        RejectCase{"estimate --model bert-mini --batch 8 --checkpoint sometimes", 2, "is not a checkpoint policy"},
        RejectCase{"estimate --model bert-mini --batch 8 --checkpoint budget:1KiB", 2,
                   "the smallest training peak a checkpoint plan reaches is"},
        RejectCase{"train --model bert-mini --dataset synthetic-seq --steps 1 --checkpoint budget:1KiB", 2,
                   "give at least that, or a smaller --batch"},
        RejectCase{"estimate --model bert-mini --batch 8 --checkpoint budget:lots", 2, "bad size 'lots'"},
        RejectCase{"summary --model bert-mini --checkpoint budget:1GiB", 2, "a budget is resolved by the command"},
        RejectCase{"train --model resnet20 --dataset synthetic --steps 1 --checkpoint selective", 2,
                   "the model has no BertSelfAttention module"}));

INSTANTIATE_TEST_SUITE_P(
    MixedPrecision, CliRejects,
    ::testing::Values(
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --amp fp8", 2,
                   "--amp must be off, fp16 or bf16 (got 'fp8')"},
        RejectCase{"estimate --model bert-mini --batch 8 --amp fp8", 2, "--amp must be off, fp16 or bf16 (got 'fp8')"},
        RejectCase{"summary --model bert-mini --amp half-ish", 2, "(got 'half-ish')"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --loss-scale dynamic", 2,
                   "--loss-scale has no effect without --amp fp16|bf16"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --amp fp16 --loss-scale static:0", 2,
                   "the scale must be a positive finite number"},
        RejectCase{"estimate --model mlp --batch 2 --amp bf16 --loss-scale sometimes", 2,
                   "--loss-scale: unknown loss scale 'sometimes'"},
        RejectCase{"summary --model mlp --amp bf16 --loss-scale dynamic", 2, "--loss-scale"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --master-weights", 2,
                   "--master-weights needs --half"},
        RejectCase{"estimate --model mlp --batch 2 --half --amp bf16", 2,
                   "--half applies to --amp off (this run has --amp bf16)"},
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --half --loss-scale dynamic", 2,
                   "--loss-scale dynamic with --half needs --master-weights"},
        RejectCase{"summary --model mlp --half", 2, "unknown flag --half"}));

INSTANTIATE_TEST_SUITE_P(
    AccumulationAndNorm, CliRejects,
    ::testing::Values(
        RejectCase{"train --model mlp --dataset synthetic --steps 1 --accumulate 0", 2,
                   "--accumulate must be >= 1 (got 0)"},
        RejectCase{
            "train --model mlp --dataset synthetic --synthetic-size 64 --batch 8 --steps 1 --accumulate 9", 2,
            "accumulating 9 micro-batches of 8 needs 72 samples per step, more than the 8 batches of 8 in an epoch"},
        RejectCase{"summary --model vgg11_bn --norm gn", 2, "--norm applies to the ResNets"},
        RejectCase{"estimate --model resnet20 --batch 2 --norm layer", 2,
                   "--norm must be bn, gn or none (got 'layer')"}));

// oomlab run checks where its results go before the first point.
TEST(CliOutputs, RunChecksItsOutputBeforeThePoints) {
  for (const auto& [args, expected] : std::vector<std::pair<std::string, std::string>>{
           {"run experiments/01_vgg16_memory --out .", "it is a directory"},
           {"run experiments/01_vgg16_memory --out /etc/hostname/results.json", "/etc/hostname is not a directory"},
           {"run experiments/01_vgg16_memory --out /proc/results.json", "is not writable"}}) {
    const CliRun s = run_oomlab(args.substr(0, 4) + std::string(OOMLAB_SOURCE_DIR) + "/" + args.substr(4));
    EXPECT_EQ(s.code, 2) << args << ": " << s.output;
    EXPECT_NE(s.output.find(expected), std::string::npos) << args << ": " << s.output;
    EXPECT_EQ(s.output.find("[1/"), std::string::npos) << args << ": a point ran first: " << s.output;
  }
}

// Every model of the zoo at batch sizes 2^31 .. 2^62 on meta (unlimited capacity): an exact
// estimate (exit 0), out of memory beyond what can be accounted (exit 3) or a size that
// cannot be represented (exit 2); never a signal, a negative figure or an internal error.
TEST(CliOverflow, EveryModelAtHugeBatchesFailsCleanly) {
  std::istringstream names(models_list());
  std::string model;
  int checked = 0;
  while (std::getline(names, model)) {
    if (model.empty()) continue;
    for (int e : {31, 40, 50, 62}) {
      const std::string args = "estimate --model " + model + " --batch " + std::to_string(int64_t(1) << e);
      const CliRun r = run_oomlab(args);
      EXPECT_TRUE(r.code == 0 || r.code == 2 || r.code == 3) << args << " -> exit " << r.code << ": " << r.output;
      EXPECT_EQ(r.signal, 0) << args << ": " << r.output;
      EXPECT_EQ(r.output.find("internal error"), std::string::npos) << args << ": " << r.output;
      EXPECT_FALSE(std::regex_search(r.output, std::regex(" -[0-9]"))) << args << ": a negative figure? " << r.output;
      ++checked;
    }
  }
  EXPECT_GE(checked, 40);
}

// A results file into a special file is written in place: /dev/null stays a device.
TEST(CliOutputs, SpecialFilesAreWrittenInPlaceNotReplaced) {
  const CliRun r = run_oomlab("summary --model mlp --json /dev/null");
  EXPECT_EQ(r.code, 0) << r.output;
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  const CliRun s = run_oomlab("summary --model mlp --json /dev/stdout");
  EXPECT_EQ(s.code, 0) << s.output;
  EXPECT_NE(s.output.find("\"schema_version\""), std::string::npos) << s.output;
  for (const auto& e : fs::directory_iterator("/dev"))
    EXPECT_EQ(e.path().filename().string().find(".null.tmp"), std::string::npos) << e.path();
}

// --save into a read-only directory fails before training (not at the first checkpoint).
TEST(CliOutputs, ReadOnlySaveDirectoryIsRejectedUpFront) {
  if (::geteuid() == 0) GTEST_SKIP() << "root can write into read-only directories";
  const fs::path dir = tmp("ro");
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
  const CliRun r = run_oomlab(std::string("train ") + kTiny + " --steps 2 --save " + dir.string());
  fs::permissions(dir, fs::perms::owner_all);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("not writable"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// Retention removes only checkpoints this run wrote and never the one `latest` names; a
// second run into the same folder keeps a valid `latest`.
TEST(CliCheckpoints, RetentionOnlyRemovesTheRunsOwnCheckpoints) {
  const fs::path dir = tmp("retention");
  fs::remove_all(dir);
  fs::create_directories(dir / "step-999");
  std::ofstream(dir / "step-999" / "mine.txt") << "a user's folder\n";
  CliRun r = run_oomlab(std::string("train ") + kTiny + " --steps 8 --save-every 2 --save " + dir.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "step-999" / "mine.txt"));
  EXPECT_FALSE(fs::exists(dir / "step-2"));
  EXPECT_FALSE(fs::exists(dir / "step-4"));
  EXPECT_TRUE(fs::exists(dir / "step-6"));
  EXPECT_TRUE(fs::exists(dir / "step-8"));
  // A second, shorter run into the same folder: its own step-2 and `latest` survive.
  r = run_oomlab(std::string("train ") + kTiny + " --steps 2 --seed 1 --save " + dir.string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::string latest;
  std::getline(std::ifstream(dir / "latest"), latest);
  EXPECT_EQ(latest, "step-2");
  EXPECT_TRUE(fs::exists(dir / "step-2" / "trainer_state.json"));
  EXPECT_TRUE(fs::exists(dir / "step-8"));   // the first run's: not this run's to delete
  r = run_oomlab(std::string("train ") + kTiny + " --steps 3 --seed 1 --resume " + dir.string());
  EXPECT_EQ(r.code, 0) << r.output;
  fs::remove_all(dir);
}

// A save folder whose first checkpoint is complete but `latest` was never written (a crash
// between the two) resumes from that checkpoint.
TEST(CliCheckpoints, ResumeFindsACompleteCheckpointWithoutLatest) {
  const fs::path dir = tmp("nolatest");
  fs::remove_all(dir);
  CliRun r = run_oomlab(std::string("train ") + kTiny + " --steps 2 --save " + dir.string());
  ASSERT_EQ(r.code, 0) << r.output;
  fs::remove(dir / "latest");
  r = run_oomlab(std::string("train ") + kTiny + " --steps 4 --resume " + dir.string());
  EXPECT_EQ(r.code, 0) << r.output;
  fs::remove_all(dir);
}

// Resuming with another recipe or data than the checkpoint's is refused, naming the key.
TEST(CliCheckpoints, ResumeRefusesADifferentLrOrDataset) {
  const fs::path dir = tmp("mismatch");
  fs::remove_all(dir);
  CliRun r = run_oomlab(std::string("train ") + kTiny + " --steps 2 --save " + dir.string());
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* extra : {"--lr 0.5", "--input 1,8,8"}) {
    r = run_oomlab(std::string("train --model mlp --dataset synthetic --synthetic-size 64 --batch 16 --eval-batches 1 "
                               "--quiet --steps 4 ") + extra + " --resume " + dir.string());
    EXPECT_EQ(r.code, 2) << extra << ": " << r.output;
    EXPECT_NE(r.output.find("was made with"), std::string::npos) << extra << ": " << r.output;
  }
  r = run_oomlab("train --model mlp --dataset synthetic --synthetic-size 80 --batch 16 --eval-batches 1 --quiet "
                 "--steps 4 --resume " + dir.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("synthetic_size"), std::string::npos) << r.output;
  fs::remove_all(dir);
}

// Divergence is a result: strict JSON with null losses and diverged_at_step, exit 4, the
// last good checkpoint kept as `latest`, no temp folders left; --on-nan continue goes on.
TEST(CliDivergence, NanLossIsRecordedStopsAndExitsFour) {
  const fs::path dir = tmp("diverge"), out = tmp("diverge.json");
  fs::remove_all(dir);
  fs::remove(out);
  const std::string base = "train --model mlp --dataset synthetic --synthetic-size 64 --batch 16 --eval-batches 1 "
                           "--quiet --optimizer sgd --lr 1000000 --schedule constant --steps 40 ";
  CliRun r = run_oomlab(base + "--save-every 1 --save " + dir.string() + " --json " + out.string());
  ASSERT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("diverged"), std::string::npos) << r.output;
  ASSERT_TRUE(fs::exists(out)) << r.output;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(out));
  const int64_t at = j["metrics"]["diverged_at_step"].get<int64_t>();
  EXPECT_GE(at, 1);
  EXPECT_LT(at, 40);
  EXPECT_TRUE(j["metrics"]["stopped_on_nan"].get<bool>());
  EXPECT_EQ(j["metrics"]["steps"], at);
  EXPECT_TRUE(j["metrics"]["history"]["train_loss"].back().is_null());
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_NE(e.path().filename().string()[0], '.') << "leftover " << e.path();
  std::string latest;
  std::getline(std::ifstream(dir / "latest"), latest);
  if (at > 1) {
    EXPECT_EQ(latest, "step-" + std::to_string(at - 1));
  }

  fs::remove(out);
  r = run_oomlab(base + "--on-nan continue --json " + out.string());
  ASSERT_EQ(r.code, 4) << r.output;
  j = nlohmann::json::parse(std::ifstream(out));
  EXPECT_EQ(j["metrics"]["steps"], 40);
  EXPECT_FALSE(j["metrics"]["stopped_on_nan"].get<bool>());
  fs::remove_all(dir);
  fs::remove(out);
}
