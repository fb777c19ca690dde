// test_cli_zero.cpp — `oomlab train --parallel ddp --zero 1|2|3 [--offload]` over gloo
// processes (and local threads) trains as DDP: float32 resnet20, the same per-step losses,
// final test loss and saved weights bit for bit on 2 ranks for every stage and offload,
// within float32 rounding on 4 ranks. Checkpoints are DDP's (the same files
// and tensors) and resume on another world size, another stage or plain DDP. The float64
// weight comparisons are tests/test_zero.cpp's.
// ctest tier: cli
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "engine/io/safetensors.h"
#include "temp_dir_util.h"

namespace {
struct Losses {
  nlohmann::json train, test;
  std::map<std::string, std::vector<double>> weights;   // the saved model after the last step
};

Losses train(const std::string& backend, int ranks, const std::string& zero, const std::string& parallel = "ddp") {
  TempDir d("cli_zero");
  const CliRun r = run_oomlab("train --model resnet20 --dataset synthetic --batch 8 --optimizer adamw --parallel " +
                              parallel + " --devices " + std::to_string(ranks) + " --backend " + backend + zero +
                              " --steps 4 --synthetic-size 128 --eval-batches 2 --quiet --seed 5 --json " +
                              d.file("r.json") + " --save " + d.file("ck"));
  EXPECT_EQ(r.code, 0) << backend << zero << "\n" << r.output;
  if (r.code != 0) return {};
  std::ifstream in(d.file("r.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& h = j["metrics"]["history"];
  Losses out{h["train_loss"], h["epochs"].empty() ? nlohmann::json() : h["epochs"].back()["test_loss"], {}};
  for (const auto& [n, t] : oomlab::read_safetensors(d.file("ck/step-4/model.safetensors")).tensors)
    out.weights[n] = t.to_vector();
  return out;
}
}  // namespace

TEST(CliZero, EveryStageOverGlooTrainsAsDdp) {
  const Losses ddp = train("local", 2, "");
  ASSERT_FALSE(ddp.train.is_null());
  EXPECT_EQ(train("gloo", 2, "").train, ddp.train);
  for (const char* z : {" --zero 1", " --zero 2", " --zero 3", " --zero 2 --offload optimizer",
                        " --zero 3 --offload params"}) {
    const Losses s = train("gloo", 2, z);
    EXPECT_EQ(s.train, ddp.train) << z;
    EXPECT_EQ(s.test, ddp.test) << z;
    EXPECT_EQ(s.weights, ddp.weights) << z << ": the trained weights, bit for bit";
  }
  // --parallel fsdp is --zero 3
  EXPECT_EQ(train("gloo", 2, "", "fsdp").weights, ddp.weights);
  // channels_last weights: the shards and stage 3's units hold them in NHWC order
  const Losses cl = train("local", 2, " --channels-last");
  for (const char* z : {" --zero 2", " --zero 3"})
    EXPECT_EQ(train("gloo", 2, std::string(z) + " --channels-last").weights, cl.weights) << z << " --channels-last";
  // stage 3 with every block checkpointed: the re-run in backward gathers its units again
  const Losses ckpt = train("local", 2, " --checkpoint all");
  const Losses ckpt3 = train("gloo", 2, " --zero 3 --checkpoint all");
  EXPECT_EQ(ckpt3.train, ckpt.train);
  EXPECT_EQ(ckpt3.test, ckpt.test);
  EXPECT_EQ(ckpt.train, ddp.train);   // checkpointing changes nothing either
  // 4 ranks: sums of four float32 terms in another order (gloo's reduce-scatter, the local
  // ring's all-reduce): equal within float32 rounding
  const Losses four = train("local", 4, "");
  // the trained weights: AdamW's first steps divide by sqrt(v), so a weight whose gradient
  // is near 0 may move by up to lr (1e-3) where rounding differs; each tensor's RMS difference
  // within 5e-5 + 1e-4 x its RMS (a wrong shard or step moves whole tensors by ~lr; measured on
  // the 2-core AVX-512 VM, 2026-12-02: up to 1.3e-5, bn1.bias, and 1.2e-5 relative in a loss)
  for (const char* z : {" --zero 1", " --zero 2 --offload optimizer"}) {
    const Losses s = train("gloo", 4, z);
    ASSERT_EQ(s.weights.size(), four.weights.size()) << z;
    for (const auto& [name, w] : four.weights) {
      double diff = 0, norm = 0;
      for (size_t i = 0; i < w.size(); ++i) {
        diff += (s.weights.at(name)[i] - w[i]) * (s.weights.at(name)[i] - w[i]);
        norm += w[i] * w[i];
      }
      const double n = double(w.size());
      EXPECT_LE(std::sqrt(diff / n), 5e-5 + 1e-4 * std::sqrt(norm / n)) << z << " " << name;
    }
  }
  const Losses four3 = train("gloo", 4, " --zero 3");
  ASSERT_EQ(four3.train.size(), four.train.size());
  for (size_t i = 0; i < four.train.size(); ++i)
    EXPECT_NEAR(four3.train[i].get<double>(), four.train[i].get<double>(), 5e-5 * four.train[i].get<double>()) << i;
  EXPECT_NEAR(four3.test.get<double>(), four.test.get<double>(), 5e-5 * four.test.get<double>());
}

TEST(CliZero, FsdpIsDdpWithZero3) {
  TempDir d("cli_fsdp");
  const std::string est = "estimate --model bert-tiny --batch 8 --seq-len 64 --devices 4 --json ";
  ASSERT_EQ(run_oomlab(est + d.file("z3.json") + " --parallel ddp --zero 3").code, 0);
  ASSERT_EQ(run_oomlab(est + d.file("fsdp.json") + " --parallel fsdp").code, 0);
  auto metrics = [&](const char* f) {
    std::ifstream in(d.file(f));
    return nlohmann::json::parse(in)["metrics"];
  };
  EXPECT_EQ(metrics("fsdp.json"), metrics("z3.json"));
  EXPECT_EQ(metrics("fsdp.json")["ddp"]["zero_stage"], 3);
  // fsdp is stage 3: another stage is refused by name
  const CliRun r = run_oomlab(est + d.file("x.json") + " --parallel fsdp --zero 2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--zero applies to --parallel ddp"), std::string::npos) << r.output;
}

namespace {
// mlp (no BatchNorm: another world size computes the same step), a constant lr (a run cut
// short has the schedule of the whole run)
std::string mlp_run(const std::string& ranks_and_batch, const std::string& rest) {
  return "train --model mlp --dataset synthetic --optimizer adamw --parallel ddp --synthetic-size 128 "
         "--eval-batches 2 --quiet --seed 5 --schedule constant " + ranks_and_batch + " " + rest;
}

double test_loss(const std::string& json_file) {
  std::ifstream in(json_file);
  return nlohmann::json::parse(in)["metrics"]["history"]["epochs"].back()["test_loss"].get<double>();
}

std::map<std::string, std::vector<double>> tensors_of(const std::string& file) {
  std::map<std::string, std::vector<double>> m;
  for (const auto& [n, t] : oomlab::read_safetensors(file).tensors) m[n] = t.to_vector();
  return m;
}

void expect_close(const std::map<std::string, std::vector<double>>& got,
                  const std::map<std::string, std::vector<double>>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    const auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": " << name;
    ASSERT_EQ(it->second.size(), w.size()) << what << ": " << name;
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(it->second[i], w[i], tol * (1 + std::abs(w[i]))) << what << ": " << name << "[" << i << "]";
  }
}
}  // namespace

TEST(CliZero, CheckpointsAreDdpsAndResumeOnAnotherWorldSize) {
  TempDir d("cli_zero_ck");
  auto ok = [](const std::string& args) {
    const CliRun r = run_oomlab(args);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.output;
  };
  const std::string two = "--devices 2 --batch 8", four = "--devices 4 --batch 4";
  ok(mlp_run(two, "--steps 6 --save " + d.file("ddp") + " --json " + d.file("ddp.json")));
  ok(mlp_run(two, "--steps 3 --save " + d.file("ddp3")));
  // a ZeRO-2 checkpoint over gloo holds DDP's tensors: step 3 equal to DDP's own
  ok(mlp_run(two, "--backend gloo --zero 2 --steps 3 --save " + d.file("z2")));
  for (const char* f : {"model.safetensors", "trainer_state.safetensors"})
    expect_close(tensors_of(d.file("z2/step-3/") + f), tensors_of(d.file("ddp3/step-3/") + f), 0, f);
  // resumed on 4 ranks under ZeRO-3, then on 2 under plain DDP: the 6-step DDP run's weights
  ok(mlp_run(four, "--zero 3 --steps 5 --resume " + d.file("z2") + " --save " + d.file("z3")));
  ok(mlp_run(two, "--steps 6 --resume " + d.file("z3") + " --save " + d.file("back") + " --json " +
                      d.file("back.json")));
  expect_close(tensors_of(d.file("back/step-6/model.safetensors")), tensors_of(d.file("ddp/step-6/model.safetensors")),
               1e-5, "ZeRO-2 -> ZeRO-3 on 4 ranks -> DDP");
  EXPECT_NEAR(test_loss(d.file("back.json")), test_loss(d.file("ddp.json")), 1e-5);
  // a DDP checkpoint resumes under ZeRO-1 on 4 ranks
  ok(mlp_run(four, "--zero 1 --steps 6 --resume " + d.file("ddp3") + " --save " + d.file("z1")));
  expect_close(tensors_of(d.file("z1/step-6/model.safetensors")), tensors_of(d.file("ddp/step-6/model.safetensors")),
               1e-5, "DDP -> ZeRO-1 on 4 ranks");
  // --half --master-weights: the float32 masters are saved as DDP's "master.<param>" tensors;
  // resumed on 4 ranks, ZeRO-3 and DDP agree within float16 rounding
  const std::string half = " --half --master-weights";
  ok(mlp_run(two, "--steps 3 --save " + d.file("hddp3") + half));
  ok(mlp_run(two, "--zero 2 --steps 3 --save " + d.file("hz2") + half));
  for (const char* f : {"model.safetensors", "trainer_state.safetensors"})
    expect_close(tensors_of(d.file("hz2/step-3/") + f), tensors_of(d.file("hddp3/step-3/") + f), 0, f);
  ok(mlp_run(four, "--steps 6 --resume " + d.file("hddp3") + " --save " + d.file("hddp") + " --json " +
                       d.file("hddp.json") + half));
  ok(mlp_run(four, "--zero 3 --steps 6 --resume " + d.file("hz2") + " --save " + d.file("hz3") + " --json " +
                       d.file("hz3.json") + half));
  EXPECT_NEAR(test_loss(d.file("hz3.json")), test_loss(d.file("hddp.json")), 1e-4 * test_loss(d.file("hddp.json")));
  // parameter groups (--lr-groups): each shard holds one group's parameters; the checkpoint
  // is DDP's, group by group, and resumes under ZeRO-3 on 4 ranks
  const std::string groups = " --lr-groups 1.=0.5,3.=2";
  ok(mlp_run(two, "--steps 6 --save " + d.file("g_ddp") + groups));
  ok(mlp_run(two, "--steps 3 --save " + d.file("g_ddp3") + groups));
  ok(mlp_run(two, "--backend gloo --zero 2 --steps 3 --save " + d.file("g_z2") + groups));
  for (const char* f : {"model.safetensors", "trainer_state.safetensors"})
    expect_close(tensors_of(d.file("g_z2/step-3/") + f), tensors_of(d.file("g_ddp3/step-3/") + f), 0, f);
  ok(mlp_run(four, "--zero 3 --steps 6 --resume " + d.file("g_z2") + " --save " + d.file("g_z3") + groups));
  expect_close(tensors_of(d.file("g_z3/step-6/model.safetensors")),
               tensors_of(d.file("g_ddp/step-6/model.safetensors")), 1e-5, "lr groups: ZeRO-2 -> ZeRO-3 on 4 ranks");
  // resumed with other groups: one clear error naming the group
  const CliRun r = run_oomlab(mlp_run(two, "--zero 2 --steps 6 --resume " + d.file("g_z2")));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("ZeRO resume"), std::string::npos) << r.output;
  // a weight EMA (stages 1 and 2 hold the whole parameters after each step): DDP's EMA,
  // evaluated and saved alike
  ok(mlp_run(two, "--steps 4 --ema 0.9 --save " + d.file("ema_ddp") + " --json " + d.file("ema_ddp.json")));
  ok(mlp_run(two, "--zero 2 --backend gloo --steps 4 --ema 0.9 --save " + d.file("ema_z2") + " --json " +
                      d.file("ema_z2.json")));
  EXPECT_EQ(test_loss(d.file("ema_z2.json")), test_loss(d.file("ema_ddp.json")));
  expect_close(tensors_of(d.file("ema_z2/step-4/trainer_state.safetensors")),
               tensors_of(d.file("ema_ddp/step-4/trainer_state.safetensors")), 0, "the EMA and optimizer state");
}
