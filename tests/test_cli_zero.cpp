// test_cli_zero.cpp — `oomlab train --parallel ddp --zero 1|2|3` over gloo processes (and
// local threads) trains as DDP: float32 resnet20, the same per-step losses and the same
// final test loss (evaluated on the trained weights) bit for bit on 2 ranks for every stage,
// within float32 rounding on 4 ranks for stage 3. The float64 weight comparisons are
// tests/test_zero.cpp's.
// ctest tier: cli
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_test_util.h"
#include "temp_dir_util.h"

namespace {
struct Losses {
  nlohmann::json train, test;
};

Losses train(const std::string& backend, int ranks, const std::string& zero) {
  TempDir d("cli_zero");
  const CliRun r = run_oomlab("train --model resnet20 --dataset synthetic --batch 8 --optimizer adamw --parallel ddp "
                              "--devices " + std::to_string(ranks) + " --backend " + backend + zero +
                              " --steps 4 --synthetic-size 128 --eval-batches 2 --quiet --seed 5 --json " +
                              d.file("r.json"));
  EXPECT_EQ(r.code, 0) << backend << zero << "\n" << r.output;
  if (r.code != 0) return {};
  std::ifstream in(d.file("r.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& h = j["metrics"]["history"];
  return {h["train_loss"], h["epochs"].empty() ? nlohmann::json() : h["epochs"].back()["test_loss"]};
}
}  // namespace

TEST(CliZero, EveryStageOverGlooTrainsAsDdp) {
  const Losses ddp = train("local", 2, "");
  ASSERT_FALSE(ddp.train.is_null());
  EXPECT_EQ(train("gloo", 2, "").train, ddp.train);
  for (const char* z : {" --zero 1", " --zero 2", " --zero 3"}) {
    const Losses s = train("gloo", 2, z);
    EXPECT_EQ(s.train, ddp.train) << z;
    EXPECT_EQ(s.test, ddp.test) << z;
  }
  // stage 3 with every block checkpointed: the re-run in backward gathers its units again
  const Losses ckpt = train("local", 2, " --checkpoint all");
  const Losses ckpt3 = train("gloo", 2, " --zero 3 --checkpoint all");
  EXPECT_EQ(ckpt3.train, ckpt.train);
  EXPECT_EQ(ckpt3.test, ckpt.test);
  EXPECT_EQ(ckpt.train, ddp.train);   // checkpointing changes nothing either
  // 4 ranks: sums of four float32 terms in another order (gloo's reduce-scatter, the local
  // ring's all-reduce): equal within float32 rounding
  const Losses four = train("local", 4, "");
  const Losses four3 = train("gloo", 4, " --zero 3");
  ASSERT_EQ(four3.train.size(), four.train.size());
  for (size_t i = 0; i < four.train.size(); ++i)
    EXPECT_NEAR(four3.train[i].get<double>(), four.train[i].get<double>(), 1e-5 * four.train[i].get<double>()) << i;
  EXPECT_NEAR(four3.test.get<double>(), four.test.get<double>(), 1e-5 * four.test.get<double>());
}
