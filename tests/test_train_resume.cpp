// test_train_resume.cpp — the trainer end to end on small synthetic data: it learns,
// writes strict results JSON, and resuming from a checkpoint reproduces the
// uninterrupted run bit-exactly (weights, BN stats, optimizer state, EMA, loss curve),
// at an epoch boundary and mid-epoch. Checkpoint robustness: an edited trainer_state.json
// fails its CRC32; a missing or mistyped state field is an IoError naming the file and
// the field; replacing an existing step directory is crash-safe.
// ctest tier: models
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <functional>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/safetensors.h"
#include "engine/train/checkpoint.h"
#include "experiments/train/train_command.h"

using namespace oomlab;
namespace fs = std::filesystem;

namespace {
fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("oomlab_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

RunSpec small_config() {
  RunSpec c;
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

nlohmann::json read_json(const fs::path& file) { return nlohmann::json::parse(read_file(file.string())); }

// Rewrites a checkpoint's trainer_state.json and, when `fix_crc`, the CRC32 recorded for
// it in trainer_state.safetensors (so only the field validation can catch the edit).
void rewrite_state(const fs::path& ckpt, const std::function<void(nlohmann::json&)>& edit, bool fix_crc) {
  nlohmann::json st = read_json(ckpt / "trainer_state.json");
  edit(st);
  const std::string bytes = st.dump(2) + "\n";
  write_file_atomic((ckpt / "trainer_state.json").string(), bytes);
  if (!fix_crc) return;
  SafetensorsContents t = read_safetensors((ckpt / "trainer_state.safetensors").string());
  char crc[9];
  std::snprintf(crc, sizeof crc, "%08lx",
                crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), uInt(bytes.size())));
  t.metadata[kTrainerStateJsonCrcKey] = crc;
  t.metadata.erase(kSafetensorsCrcKey);
  write_safetensors((ckpt / "trainer_state.safetensors").string(), t.tensors, t.metadata);
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
  RunSpec ca = small_config();
  ca.save_dir = a.string();
  ca.save_every = 4;                      // checkpoints at 4, 8 and the end (10)
  nlohmann::json ra = train(ca);
  ASSERT_TRUE(fs::exists(a / "step-8"));
  ASSERT_TRUE(fs::exists(a / "step-10"));

  RunSpec cb = small_config();
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

// Mixed precision resumes bit-exactly too: the GradScaler's scale and growth tracker are
// part of the checkpoint, so the resumed run continues the same scale sequence (with fp16
// at 2^16 the first steps overflow and halve it, so the saved scale is not the initial one).
TEST(Trainer, ResumeIsBitExactWithAmpAndLossScaling) {
  fs::path a = temp_dir("resume_amp_a"), b = temp_dir("resume_amp_b");
  RunSpec ca = small_config();
  ca.amp = DType::f16;
  ca.loss_scale = parse_loss_scale("dynamic", true);
  ca.save_dir = a.string();
  ca.save_every = 4;
  nlohmann::json ra = train(ca);
  const auto& h = ra["metrics"]["history"];
  ASSERT_EQ(h["loss_scale"].size(), 10u);
  EXPECT_FALSE(h["found_inf_steps"].empty()) << "fp16 at 2^16 overflows at first: " << h.dump();
  EXPECT_LT(h["loss_scale"].back().get<double>(), 65536.0);
  const nlohmann::json saved = read_json(a / "step-8" / "trainer_state.json");
  EXPECT_EQ(saved["grad_scaler"]["scale"], h["loss_scale"][8]) << "the scale after step 8 is the one step 9 uses";

  RunSpec cb = ca;
  cb.save_dir = b.string();
  cb.resume_dir = (a / "step-8").string();
  nlohmann::json rb = train(cb);
  EXPECT_EQ(ra["metrics"]["history"]["train_loss"], rb["metrics"]["history"]["train_loss"]);
  EXPECT_EQ(ra["metrics"]["history"]["loss_scale"], rb["metrics"]["history"]["loss_scale"]);
  EXPECT_EQ(ra["metrics"]["history"]["found_inf_steps"], rb["metrics"]["history"]["found_inf_steps"]);
  EXPECT_EQ(load_all(a / "step-10" / "model.safetensors"), load_all(b / "step-10" / "model.safetensors"));

  RunSpec other = small_config();   // fp32: a different run, refused before any weights load
  other.resume_dir = (a / "step-8").string();
  try {
    train(other);
    FAIL() << "expected a config mismatch";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("amp=\"fp16\""), std::string::npos) << e.what();
  }
  fs::remove_all(a);
  fs::remove_all(b);
}

// --half --master-weights: the float32 masters and the scaler travel in the checkpoint, so
// the resumed run repeats the uninterrupted one bit for bit; a plain --half run differs on
// the half / master_weights keys and is refused.
TEST(Trainer, ResumeIsBitExactWithHalfAndMasterWeights) {
  fs::path a = temp_dir("resume_half_a"), b = temp_dir("resume_half_b");
  RunSpec ca = small_config();
  ca.half = true;
  ca.master_weights = true;
  ca.loss_scale = parse_loss_scale("dynamic", true);
  ca.save_dir = a.string();
  ca.save_every = 4;
  nlohmann::json ra = train(ca);
  {   // (tensors read here live in the cpu allocator, which the next train() replaces)
    bool has_master = false;
    for (const auto& [n, t] : read_safetensors((a / "step-8" / "trainer_state.safetensors").string()).tensors)
      if (n == "master.conv1.weight") has_master = t.dtype() == DType::f32;
    EXPECT_TRUE(has_master) << "the float32 master of conv1.weight is in the checkpoint";
    for (const auto& [n, t] : read_safetensors((a / "step-8" / "model.safetensors").string()).tensors) {
      if (n == "conv1.weight") {
        EXPECT_EQ(t.dtype(), DType::f16);
      }
      if (n == "bn1.weight" || n == "bn1.running_var") {
        EXPECT_EQ(t.dtype(), DType::f32) << n;
      }
    }
  }

  RunSpec cb = ca;
  cb.save_dir = b.string();
  cb.resume_dir = (a / "step-8").string();
  nlohmann::json rb = train(cb);
  EXPECT_EQ(ra["metrics"]["history"]["train_loss"], rb["metrics"]["history"]["train_loss"]);
  EXPECT_EQ(ra["metrics"]["history"]["loss_scale"], rb["metrics"]["history"]["loss_scale"]);
  EXPECT_EQ(load_all(a / "step-10" / "model.safetensors"), load_all(b / "step-10" / "model.safetensors"));
  EXPECT_EQ(load_all(a / "step-10" / "trainer_state.safetensors"),
            load_all(b / "step-10" / "trainer_state.safetensors"));

  RunSpec plain = small_config();
  plain.half = true;
  plain.resume_dir = (a / "step-8").string();
  try {
    train(plain);
    FAIL() << "expected a config mismatch";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("master_weights=true"), std::string::npos) << e.what();
  }
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Trainer, LearnsSyntheticTaskAndWritesStrictJson) {
  RunSpec c = small_config();
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
  EXPECT_TRUE(r["memory"]["devices"]["cpu:0"].contains("allocated_bytes.all.peak"));
  EXPECT_EQ(r["memory"]["totals"]["allocated_bytes.all.peak"],
            r["memory"]["devices"]["cpu:0"]["allocated_bytes.all.peak"]);
  EXPECT_EQ(r["config"]["device"], "cpu:0");
  EXPECT_EQ(r["config"]["recipe"]["family"], "cnn");
  EXPECT_NO_THROW(check_json_finite(r));
}

TEST(Trainer, CorruptCheckpointFailsClearly) {
  fs::path a = temp_dir("corrupt");
  RunSpec c = small_config();
  c.steps = 2;
  c.save_dir = a.string();
  train(c);
  fs::path model = a / "step-2" / "model.safetensors";
  std::string bytes = read_file(model.string());
  bytes[bytes.size() - 3] ^= 0x5a;
  write_file_atomic(model.string(), bytes);
  RunSpec r = small_config();
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
  RunSpec c = small_config();
  c.batch = 1000;
  EXPECT_THROW(train(c), ValueError);
}

// Resume from a checkpoint whose data cursor is inside an epoch, with AdamW, a
// warmup-cosine schedule and EMA: the continued run equals the uninterrupted one bit for bit.
TEST(Trainer, MidEpochResumeIsBitExact) {
  fs::path a = temp_dir("midepoch_a"), b = temp_dir("midepoch_b");
  auto config = [] {
    RunSpec c = small_config();
    c.model = "mlp";
    c.steps = 12;                         // 8 batches per epoch: the run crosses one epoch boundary
    c.optimizer = "adamw";
    c.lr = 1e-3;
    c.weight_decay = 0.01;
    c.schedule = "warmup-cosine:warmup=3,t_max=12";
    c.ema_decay = 0.9;
    return c;
  };
  RunSpec ca = config();
  ca.save_dir = a.string();
  ca.save_every = 5;                      // 5, 10 and 12; the newest two are kept
  nlohmann::json ra = train(ca);
  ASSERT_TRUE(fs::exists(a / "step-10"));
  const nlohmann::json st = read_json(a / "step-10" / "trainer_state.json");
  ASSERT_EQ(st["loader"]["epoch"], 1);
  ASSERT_EQ(st["loader"]["cursor"], 2);   // mid-epoch: 2 of 8 batches of epoch 1 consumed
  EXPECT_EQ(st["ema"]["num_updates"], 10);

  RunSpec cb = config();
  cb.resume_dir = (a / "step-10").string();
  cb.save_dir = b.string();
  nlohmann::json rb = train(cb);

  for (const char* k : {"train_loss", "lr", "epochs"})
    EXPECT_EQ(ra["metrics"]["history"][k], rb["metrics"]["history"][k]) << k;
  EXPECT_EQ(load_all(a / "step-12" / "model.safetensors"), load_all(b / "step-12" / "model.safetensors"));
  EXPECT_EQ(load_all(a / "step-12" / "trainer_state.safetensors"),
            load_all(b / "step-12" / "trainer_state.safetensors"));
  EXPECT_EQ(read_json(a / "step-12" / "trainer_state.json")["ema"],
            read_json(b / "step-12" / "trainer_state.json")["ema"]);   // EMA update count restored
  fs::remove_all(a);
  fs::remove_all(b);
}

TEST(Trainer, EditedTrainerStateFailsItsChecksum) {
  fs::path a = temp_dir("state_crc");
  RunSpec c = small_config();
  c.steps = 2;
  c.save_dir = a.string();
  train(c);
  rewrite_state(a / "step-2", [](nlohmann::json& st) { st["epoch_sums"]["loss"] = 0.5; }, /*fix_crc=*/false);
  RunSpec r = small_config();
  r.resume_dir = a.string();
  try {
    train(r);
    FAIL() << "expected an error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("trainer_state.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CRC32 mismatch"), std::string::npos) << e.what();
  }
  fs::remove_all(a);
}

struct BadStateCase {
  const char* what;
  std::function<void(nlohmann::json&)> edit;
  const char* expected;   // the field named in the message
};

// One small checkpoint (mlp, 2 steps, EMA) shared by the cases; each edits a copy.
class TrainerBadState : public ::testing::TestWithParam<BadStateCase> {
 protected:
  static RunSpec config() {
    RunSpec c = small_config();
    c.model = "mlp";
    c.steps = 2;
    return c;
  }
  static void SetUpTestSuite() {
    source_ = new fs::path(temp_dir("bad_state_src"));
    RunSpec c = config();
    c.save_dir = source_->string();
    train(c);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*source_);
    delete source_;
  }
  static fs::path* source_;
};
fs::path* TrainerBadState::source_ = nullptr;

TEST_P(TrainerBadState, MissingOrMistypedFieldNamesFileAndField) {
  fs::path a = temp_dir("bad_state");
  fs::copy(*source_ / "step-2", a / "step-2");
  rewrite_state(a / "step-2", GetParam().edit, /*fix_crc=*/true);   // valid CRC: the fields must be checked
  RunSpec r = config();
  r.resume_dir = (a / "step-2").string();
  try {
    train(r);
    FAIL() << "expected an error";
  } catch (const IoError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("trainer_state.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(GetParam().expected), std::string::npos) << msg;
  }
  fs::remove_all(a);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TrainerBadState,
    ::testing::Values(BadStateCase{"no_rng", [](nlohmann::json& s) { s.erase("rng"); }, "\"rng\" is missing"},
                      BadStateCase{"rng_offset_string", [](nlohmann::json& s) { s["rng"]["offset"] = "7"; },
                                   "\"rng.offset\" must be a non-negative integer"},
                      BadStateCase{"step_negative", [](nlohmann::json& s) { s["step"] = -2; }, "\"step\" must be"},
                      BadStateCase{"no_loader_cursor", [](nlohmann::json& s) { s["loader"].erase("cursor"); },
                                   "\"loader.cursor\" is missing"},
                      BadStateCase{"epoch_loss_string", [](nlohmann::json& s) { s["epoch_sums"]["loss"] = "x"; },
                                   "\"epoch_sums.loss\" must be a finite number"},
                      BadStateCase{"history_not_object", [](nlohmann::json& s) { s["history"] = 3; },
                                   "\"history\" must be an object"},
                      BadStateCase{"history_short", [](nlohmann::json& s) { s["history"]["train_loss"].erase(0); },
                                   "\"history.train_loss\" has 1 entries"},
                      BadStateCase{"no_config_model", [](nlohmann::json& s) { s["config"].erase("model"); },
                                   "\"config.model\" is missing"},
                      BadStateCase{"no_ema", [](nlohmann::json& s) { s.erase("ema"); }, "\"ema\" is missing"},
                      BadStateCase{"state_is_array", [](nlohmann::json& s) { s = nlohmann::json::array(); },
                                   "not a JSON object"}),
    [](const ::testing::TestParamInfo<BadStateCase>& i) { return std::string(i.param.what); });

// Saving a step this run already wrote replaces it whole (no leftovers), and a replacement
// interrupted between its renames still leaves a loadable checkpoint.
TEST(Checkpoint, ReplacingAStepIsCrashSafe) {
  fs::path a = temp_dir("replace");
  auto data = [](double v) {
    CheckpointData d;
    d.model = {{"w", Tensor::full({4}, v)}};
    d.state = {{"step", 3}, {"v", v}};
    return d;
  };
  std::vector<std::string> written;   // this run's own step-3: it may replace it
  save_checkpoint(a.string(), 3, data(1.0), &written);
  save_checkpoint(a.string(), 3, data(2.0), &written);
  for (const auto& e : fs::directory_iterator(a))
    EXPECT_TRUE(e.path().filename() == "step-3" || e.path().filename() == "latest") << e.path();
  NamedTensors target = {{"w", Tensor::zeros({4})}};
  LoadedCheckpoint ck = load_checkpoint(a.string(), target);
  EXPECT_EQ(ck.state["v"], 2.0);
  EXPECT_EQ(target[0].second.to_vector(), std::vector<double>(4, 2.0));

  // A crash after renaming the old step aside, before renaming the new one in.
  fs::rename(a / "step-3", a / ".old-step-3-12345");
  target = {{"w", Tensor::zeros({4})}};
  ck = load_checkpoint(a.string(), target);
  EXPECT_EQ(ck.path, (a / ".old-step-3-12345").string());
  EXPECT_EQ(target[0].second.to_vector(), std::vector<double>(4, 2.0));
  fs::remove_all(a);
}
