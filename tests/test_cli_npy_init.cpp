// test_cli_npy_init.cpp — users' own inputs and weights through the oomlab binary:
// `train --dataset npy` (shapes, classes and length from the files; --no-shuffle), `--init`
// (a run from seed 0 started on seed 5's initial weights ends bit-identical to the seed-5
// run; strict and non-strict loading), `oomlab step` (its output keys), and the clear
// exit-2 errors around them.
// ctest tier: cli
#include <gtest/gtest.h>

#include "tests/cli_test_util.h"
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/core/dispatch.h"
#include "engine/io/safetensors.h"
#include "models/model_zoo.h"
#include "npy_test_util.h"

namespace fs = std::filesystem;
using namespace oomlab;

namespace {

class NpyCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("oomlab_npycli_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "data");
    // 12 images 1x8x8 with labels 0..2; 4 test images.
    std::vector<float> x(12 * 64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 37) % 101) / 50.0f - 1.0f;
    std::vector<int64_t> y(12);
    for (size_t i = 0; i < y.size(); ++i) y[i] = int64_t(i % 3);
    npy_test::write_file((dir / "data/train_inputs.npy").string(), npy_test::npy_of("<f4", "(12, 1, 8, 8)", x));
    npy_test::write_file((dir / "data/train_labels.npy").string(), npy_test::npy_of("<i8", "(12,)", y));
    x.resize(4 * 64);
    y.resize(4);
    npy_test::write_file((dir / "data/test_inputs.npy").string(), npy_test::npy_of("<f4", "(4, 1, 8, 8)", x));
    npy_test::write_file((dir / "data/test_labels.npy").string(), npy_test::npy_of("<i8", "(4,)", y));
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string train_args() const {
    return "train --model resnet20 --dataset npy --data-dir " + (dir / "data").string() +
           " --batch 4 --steps 2 --no-shuffle --quiet --workers 0";
  }
  // resnet20's initial state_dict for `seed` on this data (1x8x8, 3 classes).
  NamedTensors initial_weights(uint64_t seed, DType dtype = DType::f32) const {
    ensure_kernels_registered();
    ModelConfig mc;
    mc.dtype = dtype;
    mc.in_channels = 1; mc.height = 8; mc.width = 8;
    mc.num_classes = 3;
    mc.seed = seed;
    return build_model("resnet20", mc)->state_dict();
  }
  fs::path dir;
};

NamedTensors saved_model(const fs::path& save_dir) {
  std::ifstream latest(save_dir / "latest");
  std::string step;
  latest >> step;
  return read_safetensors((save_dir / step / "model.safetensors").string()).tensors;
}
}  // namespace

TEST_F(NpyCli, TrainsOnTheFilesAndRecordsWhatTheyDecided) {
  const fs::path json = dir / "r.json";
  CliRun r = run_oomlab(train_args() + " --json " + json.string());
  ASSERT_EQ(r.code, 0) << r.output;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  EXPECT_EQ(j["config"]["dataset"], "npy");
  EXPECT_EQ(j["config"]["num_classes"], 3);   // inferred from the labels
  EXPECT_EQ(j["config"]["input"], (std::vector<int64_t>{1, 8, 8}));
  EXPECT_EQ(j["config"]["shuffle"], false);
  EXPECT_EQ(j["config"]["test_split"], "test");
}

TEST_F(NpyCli, InitFromAnotherSeedsWeightsEqualsThatSeedsRun) {
  write_safetensors((dir / "seed5.safetensors").string(), initial_weights(5));
  CliRun a = run_oomlab(train_args() + " --seed 5 --save " + (dir / "a").string());
  ASSERT_EQ(a.code, 0) << a.output;
  CliRun b = run_oomlab(train_args() + " --seed 0 --init " + (dir / "seed5.safetensors").string() + " --save " +
                        (dir / "b").string());
  ASSERT_EQ(b.code, 0) << b.output;
  CliRun c = run_oomlab(train_args() + " --seed 0 --save " + (dir / "c").string());
  ASSERT_EQ(c.code, 0) << c.output;
  NamedTensors ta = saved_model(dir / "a"), tb = saved_model(dir / "b"), tc = saved_model(dir / "c");
  ASSERT_EQ(ta.size(), tb.size());
  bool c_differs = false;
  for (size_t i = 0; i < ta.size(); ++i) {
    ASSERT_EQ(ta[i].first, tb[i].first);
    EXPECT_EQ(ta[i].second.to_vector(), tb[i].second.to_vector()) << ta[i].first;
    c_differs |= ta[i].second.to_vector() != tc[i].second.to_vector();
  }
  EXPECT_TRUE(c_differs) << "seed 0 without --init should train other weights";
}

TEST_F(NpyCli, StrictInitNamesTheKeysNonStrictListsWhatItSkipped) {
  NamedTensors w = initial_weights(1);
  const std::string dropped = w.back().first;   // fc.bias
  w.pop_back();
  w.emplace_back("extra.weight", Tensor::zeros({2}, DType::f32, cpu_device()));
  write_safetensors((dir / "w.safetensors").string(), w);
  const std::string init = " --init " + (dir / "w.safetensors").string();
  CliRun strict = run_oomlab(train_args() + init);
  EXPECT_EQ(strict.code, 2) << strict.output;
  EXPECT_NE(strict.output.find("missing keys (1): " + dropped), std::string::npos) << strict.output;
  EXPECT_NE(strict.output.find("unexpected keys (1): extra.weight"), std::string::npos) << strict.output;
  const fs::path json = dir / "n.json";
  CliRun loose = run_oomlab(train_args() + init + " --init-non-strict --json " + json.string());
  ASSERT_EQ(loose.code, 0) << loose.output;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  EXPECT_EQ(j["config"]["init_report"]["missing"], std::vector<std::string>{dropped});
  EXPECT_EQ(j["config"]["init_report"]["unexpected"], std::vector<std::string>{"extra.weight"});
  // A shape mismatch is an error even when non-strict (as PyTorch's load_state_dict).
  write_safetensors((dir / "s.safetensors").string(), {{"fc.bias", Tensor::zeros({7}, DType::f32, cpu_device())}});
  CliRun shape = run_oomlab(train_args() + " --init " + (dir / "s.safetensors").string() + " --init-non-strict");
  EXPECT_EQ(shape.code, 2);
  EXPECT_NE(shape.output.find("shape mismatch for 'fc.bias'"), std::string::npos) << shape.output;
}

TEST_F(NpyCli, StepWritesLossLogitsGradientsAndTheUpdatedState) {
  write_safetensors((dir / "w.safetensors").string(), initial_weights(2, DType::f64));
  const fs::path out = dir / "step.safetensors";
  CliRun r = run_oomlab("step --model resnet20 --data-dir " + (dir / "data").string() + " --init " +
                        (dir / "w.safetensors").string() + " --out " + out.string() + " --dtype float64");
  ASSERT_EQ(r.code, 0) << r.output;
  SafetensorsContents s = read_safetensors(out.string());
  std::map<std::string, Tensor> by_name(s.tensors.begin(), s.tensors.end());
  ASSERT_TRUE(by_name.count("loss") && by_name.count("logits"));
  EXPECT_EQ(by_name["logits"].shape(), (Shape{12, 3}));
  EXPECT_EQ(by_name["logits"].dtype(), DType::f64);
  EXPECT_TRUE(by_name.count("grad/conv1.weight"));
  EXPECT_FALSE(by_name.count("grad/bn1.running_mean"));   // buffers have no gradient
  EXPECT_TRUE(by_name.count("after/bn1.running_mean"));
  EXPECT_EQ(by_name["after/bn1.num_batches_tracked"].to_vector()[0], 1.0);
  // A float32 weights file into a float64 model: the dtype is named, nothing is written.
  write_safetensors((dir / "w32.safetensors").string(), initial_weights(2));
  fs::remove(out);
  CliRun wrong = run_oomlab("step --model resnet20 --data-dir " + (dir / "data").string() + " --init " +
                            (dir / "w32.safetensors").string() + " --out " + out.string() + " --dtype float64");
  EXPECT_EQ(wrong.code, 2) << wrong.output;
  EXPECT_NE(wrong.output.find("dtype mismatch for 'conv1.weight'"), std::string::npos) << wrong.output;
  EXPECT_FALSE(fs::exists(out));
  // Weights holding a NaN: the loss is NaN, and nothing is written (was: a NaN file, exit 0).
  NamedTensors nan_weights = initial_weights(2);
  for (auto& [name, t] : nan_weights)
    if (name == "fc.bias") t.data<float>()[0] = NAN;
  write_safetensors((dir / "wnan.safetensors").string(), nan_weights);
  CliRun nan_run = run_oomlab("step --model resnet20 --data-dir " + (dir / "data").string() + " --init " +
                              (dir / "wnan.safetensors").string() + " --out " + out.string());
  EXPECT_EQ(nan_run.code, 2) << nan_run.output;
  EXPECT_NE(nan_run.output.find("step: the loss is NaN: nothing is written"), std::string::npos)
      << nan_run.output;
  EXPECT_FALSE(fs::exists(out));
}

struct NpyBad { const char* args; const char* expected; };

TEST_F(NpyCli, BadUseIsAClearErrorWithNoOutput) {
  const std::string data = (dir / "data").string();
  write_safetensors((dir / "w.safetensors").string(), initial_weights(0));
  const std::string w = (dir / "w.safetensors").string();
  const std::vector<NpyBad> cases = {
      {"train --model resnet20 --dataset npy", "--dataset npy needs --data-dir"},
      {"train --model resnet20 --dataset npy --data-dir /nonexistent", "is not a directory"},
      {"train --model resnet20 --dataset npy --data-dir DATA --input 1,8,8",
       "--input applies to --dataset synthetic or synthetic-seg (this run has --dataset npy)"},
      {"train --model resnet20 --dataset npy --data-dir DATA --seq-len 8",
       "--seq-len applies to --dataset synthetic-seq (this run has --dataset npy)"},
      {"train --model bert-tiny --dataset npy --data-dir DATA", "bert-tiny cannot train on npy:"},
      {"train --model unet-small --dataset npy --data-dir DATA", "the files hold images with class labels"},
      {"train --model resnet20 --dataset npy --data-dir DATA --batch 13", "impossible batch"},
      {"train --model resnet20 --dataset npy --data-dir DATA --classes 2", "label 2"},
      {"train --model resnet20 --dataset synthetic --init /nonexistent.safetensors", "--init: /nonexistent"},
      {"train --model resnet20 --dataset synthetic --init-non-strict", "--init-non-strict needs --init"},
      {"train --model resnet20 --dataset synthetic --init W --resume /tmp", "give one"},
      {"train --model resnet20 --dataset synthetic --init W", "cannot load into"},  // 28x28 synthetic: 10 classes
      {"train --model resnet20 --dataset synthetic --dropout 0", "--dropout applies to BERT models"},
      {"train --model resnet20 --dataset synthetic --init LONG", "is not a file"},  // ENAMETOOLONG: no exception
      {"train --model resnet20 --dataset synthetic --resume LONG", "does not exist"},
      {"train --model resnet20 --dataset npy --data-dir LONG", "is not a directory"},
      {"step --model resnet20 --data-dir DATA --init W", "--out is required"},
      {"step --model resnet20 --data-dir DATA --init W --out OUT --dtype float16",
       "--dtype must be float32 or float64"},
      {"step --model bert-tiny --data-dir DATA --init W --out OUT", "takes token ids"},
      {"step --model resnet20 --data-dir DATA --init W --out OUT --device meta", "--device meta has no numbers"},
  };
  const fs::path out = dir / "out.json", step_out = dir / "step_out.safetensors";
  for (const NpyBad& c : cases) {
    std::string args = c.args;
    for (auto [from, to] : {std::pair<std::string, std::string>{"DATA", data},
                            {" W", " " + w},
                            {"OUT", step_out.string()},
                            {"LONG", std::string(5000, 'x')}}) {
      for (size_t at = args.find(from); at != std::string::npos; at = args.find(from, at + to.size()))
        args.replace(at, from.size(), to);
    }
    if (args.rfind("train", 0) == 0) args += " --json " + out.string();
    CliRun r = run_oomlab(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out)) << args;
    EXPECT_FALSE(fs::exists(step_out)) << args;
  }
}
