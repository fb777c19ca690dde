// test_cli.cpp — the oomlab binary on bad input: a clear message, exit code 2, and no
// output file; on good input: exit 0 and a strict results JSON with provenance. Also
// `--device cuda` without a usable GPU (or in a CPU-only build): one clear error line.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cuda_test_util.h"

namespace fs = std::filesystem;

namespace {
struct CliRun { int code; std::string output; };

CliRun run_oomlab(const std::string& args) {
  std::string cmd = std::string(OOMLAB_BINARY_DIR) + "/oomlab " + args + " 2>&1";
  CliRun r{0, ""};
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  while (fgets(buf.data(), int(buf.size()), p)) r.output += buf.data();
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

fs::path tmp(const std::string& name) { return fs::temp_directory_path() / ("oomlab_cli_" + name + "_" + std::to_string(::getpid())); }
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
        BadInputCase{"train --model resnet20 --device tpu", "unknown device 'tpu'"},
        BadInputCase{"train --model resnet20 --batch abc", "expects an integer"},
        BadInputCase{"train --model resnet20 --batch 0", "--batch must be >= 1"},
        BadInputCase{"train --model resnet20 --data-dir /nonexistent/fmnist", "dataset-fashion-mnist"},
        BadInputCase{"train --model resnet20 --dataset synthetic --synthetic-size 16 --batch 64", "impossible batch"},
        BadInputCase{"train --model resnet20 --dataset synthetic --device-memory 12XB", "invalid size"},
        BadInputCase{"train --model resnet20 --dataset synthetic --schedule zigzag", "zigzag"},
        BadInputCase{"train --model resnet20 --dataset synthetic --optimizer lion", "lion"},
        BadInputCase{"train --model resnet20 --dataset synthetic --resume /nonexistent/ckpt", "does not exist"},
        BadInputCase{"train --model resnet20 --dataset synthetic --steps 1 --device-memory 1MiB", "out of memory"},
        BadInputCase{"summary --model vgg16 --input 1,28,28", "too small"},
        BadInputCase{"summary --model resnet18 --input 3,x,224", "invalid --input"},
        BadInputCase{"estimate --model resnet20", "--batch is required"},
        BadInputCase{"estimate --model resnet50 --batch 64 --device-memory 1GiB", "out of memory"},
        BadInputCase{"train --model unet-small --dataset synthetic-seq --steps 1", "use --dataset synthetic-seg"},
        BadInputCase{"train --model bert-mini --dataset synthetic --steps 1", "use --dataset synthetic-seq"},
        BadInputCase{"train --model resnet20 --dataset synthetic-seg --steps 1", "cannot train on --dataset synthetic-seg"},
        BadInputCase{"train --model bert-mini --dataset synthetic-seq --seq-len 600 --steps 1", "exceeds max_positions"},
        BadInputCase{"summary --model bert-mini --input 3,32,32", "give --seq-len N, not --input"}));

TEST(Cli, UnknownCommandAndJsonIntoMissingDirectory) {
  EXPECT_EQ(run_oomlab("frobnicate").code, 2);
  CliRun missing = run_oomlab("run experiments/does_not_exist");
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.output.find("not found"), std::string::npos) << missing.output;
  CliRun r = run_oomlab("summary --model mlp --json /nonexistent/dir/out.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("does not exist or is not writable"), std::string::npos) << r.output;
}

TEST(Cli, EstimateWritesStrictJsonWithProvenance) {
  fs::path out = tmp("estimate.json");
  CliRun r = run_oomlab("estimate --model resnet50 --batch 8 --optimizer adam --json " + out.string());
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream f(out);
  nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_EQ(j["schema_version"], 1);
  for (const char* k : {"git_sha", "build_type", "compiler", "blas", "host", "device", "date"})
    EXPECT_TRUE(j["context"].contains(k)) << k;
  EXPECT_GT(j["metrics"]["exact"]["peak_allocated_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["metrics"]["exact"]["optimizer_state_bytes"], 2 * j["metrics"]["exact"]["params_bytes"].get<int64_t>());
  fs::remove(out);
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
  EXPECT_NE(r.output.find("--device cpu"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}
