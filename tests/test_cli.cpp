// test_cli.cpp — the oomlab binary on bad input: a clear message, exit code 2 (3 for out
// of memory, with the phase named), and no
// output file; on good input: exit 0 and a strict results JSON with provenance. Also
// `--device cuda` without a usable GPU (or in a CPU-only build): one clear error line;
// output paths that are directories rejected before any work; the memory snapshot still
// written when a run stops with out-of-memory; BERT/UNet architecture flags; estimate's
// --by-module table; --version, and the CUDA backend outside the binary.
// ctest tier: cli
#include <gtest/gtest.h>

#include "tests/cli_test_util.h"
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cuda_test_util.h"

namespace fs = std::filesystem;

namespace {
fs::path tmp(const std::string& name) {
  return fs::temp_directory_path() / ("oomlab_cli_" + name + "_" + std::to_string(::getpid()));
}
}  // namespace

struct BadInputCase { const char* args; const char* expected; };

class CliBadInput : public ::testing::TestWithParam<BadInputCase> {};

TEST_P(CliBadInput, ClearMessageNonZeroExitNoOutputFile) {
  fs::path out = tmp("bad.json");
  fs::remove(out);
  CliRun r = run_oomlab(std::string(GetParam().args) + " --json " + out.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(GetParam().expected), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CliBadInput,
    ::testing::Values(
        BadInputCase{"train --model resnet20 --bogus 1", "unknown flag --bogus"},
        BadInputCase{"train --model resnet99 --dataset synthetic", "unknown model"},
        BadInputCase{"train --model resnet20 --dataset imagenet", "--dataset must be"},
        BadInputCase{"train --model resnet20 --dataset synthetic --device tpu", "unknown device 'tpu'"},
        BadInputCase{"train --model resnet20 --batch abc", "expects an integer"},
        BadInputCase{"train --model resnet20 --batch 0", "--batch must be >= 1"},
        BadInputCase{"train --model resnet20 --dataset fashion-mnist --data-dir /nonexistent/fmnist",
                     "dataset-fashion-mnist"},
        BadInputCase{"train --model resnet20 --dataset synthetic --synthetic-size 16 --batch 64", "impossible batch"},
        BadInputCase{"train --model resnet20 --dataset synthetic --device-memory 12XB", "invalid size"},
        BadInputCase{"train --model resnet20 --dataset synthetic --schedule zigzag", "zigzag"},
        BadInputCase{"train --model resnet20 --dataset synthetic --optimizer lion", "lion"},
        BadInputCase{"train --model resnet20 --dataset synthetic --resume /nonexistent/ckpt", "does not exist"},
        BadInputCase{"summary --model vgg16 --input 1,28,28", "too small"},
        BadInputCase{"summary --model resnet18 --input 3,x,224", "invalid --input"},
        BadInputCase{"estimate --model resnet20", "--batch is required"},
        BadInputCase{"train --model unet-small --dataset synthetic-seq --steps 1", "use --dataset synthetic-seg"},
        BadInputCase{"train --model bert-mini --dataset synthetic --steps 1", "use --dataset synthetic-seq"},
        BadInputCase{"train --model resnet20 --dataset synthetic-seg --steps 1",
                     "cannot train on --dataset synthetic-seg"},
        BadInputCase{"train --model bert-mini --dataset synthetic-seq --seq-len 600 --steps 1",
                     "exceeds max_positions"},
        BadInputCase{"summary --model bert-mini --input 3,32,32", "give --seq-len N, not --input"},
        BadInputCase{"train --model resnet20 --dataset synthetic --steps 0", "--steps must be >= 1 (got 0)"},
        BadInputCase{"train --model resnet20 --dataset synthetic --steps 1 --seed 99999999999999999999999",
                     "--seed value '99999999999999999999999' is out of range"},
        BadInputCase{"train --model resnet20 --dataset synthetic --steps 1 --seed -1", "--seed must be >= 0"},
        BadInputCase{"train --model resnet20 --dataset synthetic --batch 99999999999999999999",
                     "--batch value '99999999999999999999' is out of range"},
        BadInputCase{"summary --model resnet18 --input 3,99999999999999999999,224", "out of range"},
        BadInputCase{"estimate --model resnet20 --batch 8 --device-memory 0.5", "less than 1 byte"},
        BadInputCase{"estimate --model resnet20 --batch 8 --device-memory 1e30GiB", "too large"},
        BadInputCase{"summary --model bert-mini --hidden 250 --heads 4", "not divisible"},
        BadInputCase{"summary --model resnet20 --base-width 8", "--base-width applies to UNet models"},
        BadInputCase{"estimate --model unet-small --batch 2 --heads 4", "--heads applies to BERT models"},
        BadInputCase{"train --model resnet20 --dataset synthetic --steps 1 --dropout 0.2",
                     "--model resnet20 is not one"},
        BadInputCase{"summary --model bert-mini --layers 0", "--layers must be in 1..1024 (got 0)"},
        BadInputCase{"summary --model bert-mini --dropout 1", "--dropout must be in [0, 1)"},
        BadInputCase{"summary --model unet-small --depth 9", "depth must be in 1..8"},
        BadInputCase{"train --model bert-mini --dataset synthetic-seq --steps 1 --long-seq-prob 0.1 --long-seq-len 600",
                     "--long-seq-len 600 exceeds max_positions 512 of bert-mini"},
        BadInputCase{"train --model bert-mini --dataset synthetic-seq --steps 1 --seq-len 600",
                     "pass --max-positions 600"},
        BadInputCase{"summary --model bert-mini --seq-len 100 --max-positions 64", "exceeds max_positions 64"},
        BadInputCase{"train --model mlp --dataset synthetic --steps 1 --on-oom retry",
                     "--on-oom must be raise, skip or split"},
        BadInputCase{"train --model mlp --dataset synthetic --steps 1 --workers -1",
                     "--workers must be in 0..64 (got -1)"},
        BadInputCase{"trick --name nope",
                     "--name must be graph-history, del-intermediates, inplace-relu or empty-cache (got 'nope')"},
        BadInputCase{"train --model bert-mini --dataset synthetic-seq --device meta --steps 1 --batch 1 --on-oom split "
                     "--device-memory 64MiB --long-seq-prob 0.1 --long-seq-len 512",
                     "--on-oom split cannot make this run fit: one sequence of 512 tokens"}));

TEST(Cli, UnknownCommandAndJsonIntoMissingDirectory) {
  EXPECT_EQ(run_oomlab("frobnicate").code, 2);
  CliRun missing = run_oomlab("run experiments/does_not_exist");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.output.find("not found"), std::string::npos) << missing.output;
  CliRun r = run_oomlab("summary --model mlp --json /nonexistent/dir/out.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
}

// Checking where results will go creates nothing: a command refused after that check
// (here for a missing --resume) leaves no folder behind, while a writable place still passes.
TEST(Cli, RefusedTrainCreatesNoSaveFolder) {
  const fs::path base = tmp("save_parent");
  fs::remove_all(base);
  const fs::path save = base / "a" / "b";
  CliRun r = run_oomlab("train --model mlp --dataset synthetic --steps 1 --save " + save.string() +
                        " --resume /nonexistent/ckpt");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_FALSE(fs::exists(base)) << "a refused command created " << base;
  CliRun file_parent = run_oomlab("train --model mlp --dataset synthetic --steps 1 --save /etc/hostname/ckpt");
  EXPECT_EQ(file_parent.code, 2) << file_parent.output;
  EXPECT_NE(file_parent.output.find("/etc/hostname is not a directory"), std::string::npos) << file_parent.output;
}

TEST(Cli, EstimateWritesStrictJsonWithProvenance) {
  fs::path out = tmp("estimate.json");
  CliRun r = run_oomlab("estimate --model resnet50 --batch 8 --optimizer adam --json " + out.string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream f(out);
  nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["schema_version"], 2);
  for (const char* k : {"git_sha", "build_type", "compiler", "blas", "host", "device", "devices", "date"})
    EXPECT_TRUE(j["context"].contains(k)) << k;
  EXPECT_EQ(j["context"]["devices"], nlohmann::json::parse(R"([{"device": "meta:0", "physical": "host"}])"));
  // Schema 2: memory per logical device, plus totals (one device: the same figures).
  ASSERT_TRUE(j["memory"]["devices"].contains("meta:0"));
  EXPECT_EQ(j["memory"]["totals"], j["memory"]["devices"]["meta:0"]);
  EXPECT_GT(j["metrics"]["exact"]["peak_allocated_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["metrics"]["exact"]["optimizer_state_bytes"], 2 * j["metrics"]["exact"]["params_bytes"].get<int64_t>());
  fs::remove(out);
}

// --by-module: the peak's table in the text and metrics.by_module in the JSON, its rows
// summing to the exact peak (the attribution itself: test_peak_by_module.cpp).
TEST(Cli, EstimateByModuleTellsWhoHoldsThePeak) {
  fs::path out = tmp("by_module.json");
  CliRun r = run_oomlab("estimate --model resnet18 --batch 4 --by-module --json " + out.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("at the peak ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("more modules)"), std::string::npos) << r.output;
  std::ifstream f(out);
  const nlohmann::json m = nlohmann::json::parse(f)["metrics"];
  const nlohmann::json& b = m["by_module"];
  int64_t total = 0;
  for (const auto& row : b["modules"]) total += row["total_bytes"].get<int64_t>();
  EXPECT_EQ(total, m["exact"]["peak_allocated_bytes"].get<int64_t>());
  EXPECT_EQ(b["peak_allocated_bytes"], m["exact"]["peak_allocated_bytes"]);
  EXPECT_EQ(b["modules"][0].size(), b["categories"].size() + 2);   // module, total_bytes, a field per category
  fs::remove(out);
  CliRun plain = run_oomlab("estimate --model resnet18 --batch 4");
  EXPECT_EQ(plain.output.find("at the peak ("), std::string::npos) << plain.output;
}

// `oomlab --version` names the build and its backends without loading any; a CUDA build's
// oomlab links no CUDA library: its backend is liboomlab_cuda.so beside it, loaded at the
// first CUDA use (the test below and the --half one load it), so cpu and meta commands
// start as a CPU-only build's do.
TEST(Cli, VersionNamesTheBackendsAndTheBinaryLinksNoCudaLibrary) {
  CliRun r = run_oomlab("--version");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("oomlab 0.1.0 (commit ", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("\nbackends: cpu"), std::string::npos) << r.output;
  const std::string lib = fs::weakly_canonical(oomlab_path()).parent_path() / "liboomlab_cuda.so";
  CliRun ldd = run_shell("ldd " + oomlab_path());
  ASSERT_EQ(ldd.code, 0) << ldd.output;
  for (const char* cuda_lib : {"libcudart", "libcublas", "libcudnn", "libnccl"})
    EXPECT_EQ(ldd.output.find(cuda_lib), std::string::npos) << ldd.output;
  if (!oomlab::built_with_cuda()) return;
  EXPECT_NE(r.output.find("cuda (" + lib + ", loaded at its first use)"), std::string::npos) << r.output;
  CliRun lib_ldd = run_shell("ldd " + lib);
  EXPECT_NE(lib_ldd.output.find("libcublas"), std::string::npos) << lib_ldd.output;
  EXPECT_EQ(lib_ldd.output.find("not found"), std::string::npos) << lib_ldd.output;
}

TEST(Cli, CudaDeviceWithoutUsableGpuIsOneClearError) {
  std::string why;
  if (oomlab::testing::cuda_available(&why)) {   // a GPU: the same command trains
    CliRun ok = run_oomlab("train --model mlp --dataset synthetic --synthetic-size 64 --batch 16 --steps 2 "
                           "--eval-batches 1 --quiet --device cuda");
    EXPECT_EQ(ok.code, 0) << ok.output;
    return;
  }
  fs::path out = tmp("cuda.json");
  fs::remove(out);
  CliRun r = run_oomlab("train --model mlp --dataset synthetic --steps 1 --device cuda --json " + out.string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output.rfind("oomlab: error: ", 0), 0u) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  if (oomlab::built_with_cuda())
    EXPECT_NE(r.output.find("no usable CUDA device"), std::string::npos) << r.output;
  else
    EXPECT_NE(r.output.find("built without CUDA"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("use a cpu or meta device"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

// --half with a model the target backend cannot serve in float16: refused before any
// work by the pre-flight (CUDA has no float16 pixel cross-entropy, so a plain --half UNet
// cannot run there); a CPU-only build refuses the device itself. On CPU every model is
// served, so the same kind of command trains.
TEST(Cli, HalfWithAModelTheBackendCannotServeIsRefusedUpFront) {
  fs::path out = tmp("half_cuda.json");
  fs::remove(out);
  CliRun r = run_oomlab(
      "train --model unet-small --dataset synthetic-seg --input 3,16,16 --synthetic-size 16 --batch 8 "
      "--steps 1 --half --device cuda --json " +
      out.string());
  EXPECT_EQ(r.code, 2) << r.output;
  if (oomlab::built_with_cuda())
    EXPECT_NE(r.output.find("--half: unet-small cannot train in float16 on cuda: op 'pixel_cross_entropy'"),
              std::string::npos) << r.output;
  else
    EXPECT_NE(r.output.find("built without CUDA"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step 1"), std::string::npos) << "trained before failing: " << r.output;
  EXPECT_FALSE(fs::exists(out));
  CliRun cpu = run_oomlab("train --model resnet20 --dataset synthetic --synthetic-size 16 --batch 8 --steps 1 --half "
                          "--master-weights --eval-batches 1 --quiet --json " + out.string());
  EXPECT_EQ(cpu.code, 0) << cpu.output;
  EXPECT_TRUE(fs::exists(out));
  fs::remove(out);
}

// An existing directory given as an output file is rejected up front (before training).
TEST(Cli, OutputPathThatIsADirectoryIsRejectedUpFront) {
  fs::path dir = tmp("outdir");
  fs::create_directories(dir);
  for (const char* flag : {"--json", "--memory-snapshot", "--chrome-trace"}) {
    CliRun r =
        run_oomlab("train --model mlp --dataset synthetic --synthetic-size 64 --batch 8 --steps 2 --device meta " +
                   std::string(flag) + " " + dir.string());
    EXPECT_EQ(r.code, 2) << flag << ": " << r.output;
    EXPECT_NE(r.output.find("is a directory"), std::string::npos) << flag << ": " << r.output;
    EXPECT_EQ(r.output.find("epoch"), std::string::npos) << flag << ": trained before failing: " << r.output;
    EXPECT_TRUE(fs::is_directory(dir));
  }
  CliRun e = run_oomlab("estimate --model mlp --batch 2 --memory-snapshot " + dir.string());
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_NE(e.output.find("is a directory"), std::string::npos) << e.output;
  fs::remove_all(dir);
}

// The results JSON is written last: a trace that fails to write (/dev/full: no space left)
// fails the run with exit 2 and leaves no results file that would claim it succeeded.
TEST(Cli, ATraceThatCannotBeWrittenLeavesNoResultsFile) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  for (const char* args :
       {"train --model mlp --dataset synthetic --synthetic-size 64 --batch 8 --steps 2 --device meta --quiet",
        "estimate --model mlp --batch 2"}) {
    for (const char* trace : {"--memory-snapshot", "--chrome-trace"}) {
      fs::path out = tmp("trace_fails_results.json");
      fs::remove(out);
      CliRun r = run_oomlab(std::string(args) + " --json " + out.string() + " " + trace + " /dev/full");
      EXPECT_EQ(r.code, 2) << args << " " << trace << ": " << r.output;
      EXPECT_NE(r.output.find("cannot write /dev/full"), std::string::npos) << r.output;
      EXPECT_FALSE(fs::exists(out)) << args << " " << trace << ": a results file beside a failed trace";
      fs::remove(out);
    }
  }
}

// Out of memory: the snapshot and trace (showing the OOM) are written, the results JSON is
// not, and the run still fails with the OOM message and exit code 3; a training step names
// the phase it ran out in.
TEST(Cli, OutOfMemoryStillWritesSnapshotAndTrace) {
  for (const char* args : {"train --model resnet20 --dataset synthetic --device meta --batch 256 --device-memory 20MiB "
                           "--steps 1",
                           "estimate --model resnet50 --batch 64 --device-memory 1GiB"}) {
    fs::path snap = tmp("oom_snapshot.json"), trace = tmp("oom_trace.json"), out = tmp("oom_results.json");
    for (const fs::path& p : {snap, trace, out}) fs::remove(p);
    CliRun r = run_oomlab(std::string(args) + " --memory-snapshot " + snap.string() + " --chrome-trace " +
                          trace.string() + " --json " + out.string());
    EXPECT_EQ(r.code, 3) << args << ": " << r.output;   // out of memory has its own exit code
    EXPECT_NE(r.output.find("out of memory"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("wrote " + snap.string()), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out)) << args;
    ASSERT_TRUE(fs::exists(snap)) << args << ": " << r.output;
    nlohmann::json j = nlohmann::json::parse(std::ifstream(snap));
    ASSERT_TRUE(j["device_traces"].is_array() && !j["device_traces"].empty());
    int ooms = 0;
    for (const auto& e : j["device_traces"].back()) ooms += e["action"] == "oom";
    EXPECT_EQ(ooms, 1) << args;
    ASSERT_TRUE(fs::exists(trace)) << args;
    nlohmann::json t = nlohmann::json::parse(std::ifstream(trace));
    int oom_events = 0;
    for (const auto& e : t["traceEvents"]) oom_events += e["name"] == "oom";
    EXPECT_EQ(oom_events, 1) << args;
    for (const fs::path& p : {snap, trace}) fs::remove(p);
    if (std::string(args).rfind("train", 0) == 0) {
      EXPECT_NE(r.output.find("phase of a training step"), std::string::npos) << r.output;
    }
  }
}

// BERT/UNet architecture flags reach the model and are recorded in the results config.
TEST(Cli, ArchitectureFlagsChangeTheModelAndAreRecorded) {
  auto summary = [](const std::string& args) {
    fs::path out = tmp("arch_summary.json");
    CliRun r = run_oomlab("summary " + args + " --json " + out.string());
    EXPECT_EQ(r.code, 0) << args << ": " << r.output;
    nlohmann::json j = fs::exists(out) ? nlohmann::json::parse(std::ifstream(out)) : nlohmann::json::object();
    fs::remove(out);
    return j;
  };
  nlohmann::json full = summary("--model bert-mini"), two = summary("--model bert-mini --layers 2");
  ASSERT_TRUE(full.contains("metrics") && two.contains("metrics"));
  EXPECT_LT(two["metrics"]["totals"]["params"].get<int64_t>(), full["metrics"]["totals"]["params"].get<int64_t>());
  EXPECT_EQ(full["config"]["layers"], 4);
  EXPECT_EQ(two["config"]["layers"], 2);
  EXPECT_EQ(two["config"]["hidden"], 256);
  nlohmann::json unet = summary("--model unet-small --base-width 8 --depth 3");
  EXPECT_EQ(unet["config"]["base_width"], 8);
  EXPECT_EQ(unet["config"]["depth"], 3);
  EXPECT_FALSE(summary("--model resnet20")["config"].contains("hidden"));

  fs::path out = tmp("arch_train.json");
  CliRun r = run_oomlab("train --model bert-tiny --dataset synthetic-seq --synthetic-size 64 --batch 8 --steps 1 "
                        "--device meta --quiet --seq-len 32 --max-positions 64 --heads 4 --dropout 0 --json " +
                        out.string());
  ASSERT_EQ(r.code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(out));
  EXPECT_EQ(j["config"]["max_positions"], 64);
  EXPECT_EQ(j["config"]["heads"], 4);
  EXPECT_EQ(j["config"]["dropout"], 0.0);
  fs::remove(out);
}
