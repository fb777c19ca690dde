// test_train_resume.cpp — the trainer end to end on small synthetic data: it learns,
// writes strict results JSON, and resuming from a checkpoint reproduces the
// uninterrupted run bit-exactly (weights, BN stats, optimizer state, EMA, loss curve).
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/safetensors.h"
#include "engine/train/trainer.h"

using namespace oomlab;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("oomlab_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

TrainConfig small_config() {
  TrainConfig c;
  c.model = "resnet20";
  c.dataset = "synthetic";
  c.input = {1, 12, 12};
  c.synthetic_size = 64;
  c.batch = 8;
  c.steps = 10;
  c.optimizer = "sgd";
  c.lr = 0.05;
  c.ema_decay = 0.9;
  c.seed = 3;
  c.quiet = true;
  c.eval_batches = 2;
  return c;
}

std::vector<std::pair<std::string, std::vector<double>>> load_all(const fs::path& file) {
  std::vector<std::pair<std::string, std::vector<double>>> out;
  for (auto& [n, t] : read_safetensors(file.string()).tensors) {
    if (t.dtype() == DType::i64) {
      std::vector<int64_t> v = t.to_vector_i64();
      out.push_back({n, std::vector<double>(v.begin(), v.end())});
    } else {
      out.push_back({n, t.to_vector()});
    }
  }
  return out;
}
}  // namespace

TEST(Trainer, ResumeIsBitExact) {
  fs::path a = temp_dir("resume_a"), b = temp_dir("resume_b");
  TrainConfig ca = small_config();
  ca.save_dir = a.string();
  ca.save_every = 4;                      // checkpoints at 4, 8 and the end (10)
  nlohmann::json ra = train(ca);
  ASSERT_TRUE(fs::exists(a / "step-8"));
  ASSERT_TRUE(fs::exists(a / "step-10"));

  TrainConfig cb = small_config();
  cb.resume_dir = (a / "step-8").string();
  cb.save_dir = b.string();
  nlohmann::json rb = train(cb);

  EXPECT_EQ(ra["metrics"]["history"]["train_loss"], rb["metrics"]["history"]["train_loss"]);
  EXPECT_EQ(ra["metrics"]["history"]["epochs"], rb["metrics"]["history"]["epochs"]);
  EXPECT_EQ(load_all(a / "step-10" / "model.safetensors"), load_all(b / "step-10" / "model.safetensors"));
  EXPECT_EQ(load_all(a / "step-10" / "trainer_state.safetensors"),
            load_all(b / "step-10" / "trainer_state.safetensors"));
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Trainer, LearnsSyntheticTaskAndWritesStrictJson) {
  TrainConfig c = small_config();
  c.model = "mlp";
  c.input = {1, 28, 28};
  c.synthetic_size = 256;
  c.batch = 32;
  c.steps = 40;
  c.lr = 0.05;
  c.eval_batches = -1;
  nlohmann::json r = train(c);
  const auto& losses = r["metrics"]["history"]["train_loss"];
  EXPECT_LT(losses.back().get<double>(), losses.front().get<double>());
  EXPECT_GT(r["metrics"]["final_test_accuracy"].get<double>(), 0.8);
  EXPECT_GT(r["metrics"]["images_per_s"].get<double>(), 0.0);
  for (const char* k : {"schema_version", "context", "config", "metrics", "memory"}) EXPECT_TRUE(r.contains(k)) << k;
  EXPECT_TRUE(r["memory"].contains("allocated_bytes.all.peak"));
  EXPECT_NO_THROW(check_json_finite(r));
}

TEST(Trainer, CorruptCheckpointFailsClearly) {
  fs::path a = temp_dir("corrupt");
  TrainConfig c = small_config();
  c.steps = 2;
  c.save_dir = a.string();
  train(c);
  fs::path model = a / "step-2" / "model.safetensors";
  std::string bytes = read_file(model.string());
  bytes[bytes.size() - 3] ^= 0x5a;
  write_file_atomic(model.string(), bytes);
  TrainConfig r = small_config();
  r.resume_dir = a.string();   // through `latest`
  try {
    train(r);
    FAIL() << "expected an error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors"), std::string::npos) << e.what();
  }
  fs::remove_all(a);
}

TEST(Trainer, ImpossibleBatchIsAClearError) {
  TrainConfig c = small_config();
  c.batch = 1000;
  EXPECT_THROW(train(c), ValueError);
}
