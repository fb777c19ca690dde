// fuzz_trainer_state.cpp — libFuzzer target for the checkpoint's trainer_state.json reader
// (engine/train/trainer_state.h): the bytes are parsed with nlohmann::json, then given to
// parse_trainer_state(json, file).
// Expected rejections: a nlohmann::json exception from the initial parse (parse_error, or
// out_of_range 406 for a number like 1e400 that no double holds; checkpoint.cpp turns both
// into an IoError) and oomlab::Error from parse_trainer_state (IoError naming the file and
// the field's dotted path). Findings: any other exception (a nlohmann type_error /
// out_of_range from reading a mistyped field), a sanitizer report, or an accepted state
// that breaks the header's contract (negative counts, history.train_loss / history.lr not
// one entry per step; config, history, optimizer, scheduler objects; ema and divergence
// objects or null).
// Seeds: tests/fuzz/corpus/fuzz_trainer_state/ (trainer_state.json of real tiny
// checkpoints: resnet20 + SGD, mlp + AdamW + EMA, bert-tiny); dictionary:
// tests/fuzz/fuzz_trainer_state.dict.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/train/trainer_state.h"
#include "tests/fuzz/fuzz_common.h"

using oomlab_fuzz::fuzz_require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(data), size));
  } catch (const nlohmann::json::exception&) {   // parse_error, or out_of_range 406 ("1e400")
    return 0;
  }
  oomlab::TrainerState s;
  try {
    s = oomlab::parse_trainer_state(j, "fuzz/trainer_state.json");
  } catch (const oomlab::Error&) {
    return 0;
  }
  fuzz_require(s.step >= 0 && s.loader.epoch >= 0 && s.loader.cursor >= 0 && s.epoch_correct >= 0 &&
                   s.epoch_samples >= 0,
               "accepted a negative count");
  for (const char* k : {"train_loss", "lr"})
    fuzz_require(s.history.contains(k) && s.history[k].is_array() && int64_t(s.history[k].size()) == s.step,
                 "accepted a history whose length disagrees with the step");
  fuzz_require(s.config.is_object(), "accepted a state whose config is not an object");
  fuzz_require(s.history.is_object(), "accepted a state whose history is not an object");
  fuzz_require(s.optimizer.is_object(), "accepted a state whose optimizer is not an object");
  fuzz_require(s.scheduler.is_object(), "accepted a state whose scheduler is not an object");
  fuzz_require(s.ema.is_object() || s.ema.is_null(), "accepted a state whose ema is neither an object nor null");
  fuzz_require(s.divergence.is_object() || s.divergence.is_null(),
               "accepted a state whose divergence is neither an object nor null");
  return 0;
}
