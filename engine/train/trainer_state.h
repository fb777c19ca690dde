// trainer_state.h — the validated reader of a checkpoint's trainer_state.json (the part of
// a checkpoint that is not tensors: step, history, RNG, data position, epoch sums, the
// optimizer / scheduler / EMA JSON and the run's config).
// Contract: parse_trainer_state never trusts its input: a missing or mistyped field, a
// history whose length disagrees with the step, or a count outside int64 is an IoError
// naming `file` and the field's dotted path ("history.train_loss"), never a JSON-library
// exception. The components' own JSON (optimizer, scheduler, ema) is checked to be an
// object here and validated by the components when loaded.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/core/rng.h"
#include "engine/data/dataloader.h"

namespace oomlab {

struct TrainerState {
  int64_t step = 0;
  nlohmann::json config;      // object: the run's config when it was saved
  nlohmann::json history;     // object: train_loss / lr (one entry per step), epochs, skipped
  Generator rng;              // the device generator's seed and offset
  LoaderState loader;
  double epoch_loss = 0;      // running sums of the epoch in progress
  int64_t epoch_correct = 0, epoch_samples = 0;
  int64_t epoch_scored = -1;  // positions accuracy counts (-1: an older checkpoint's, which has none)
  nlohmann::json optimizer, scheduler;   // objects
  nlohmann::json ema;                    // object, or null when the run had no EMA
  nlohmann::json divergence;             // object ({"step", "loss"}) or null: the run had diverged
};

TrainerState parse_trainer_state(const nlohmann::json& state, const std::string& file);

}  // namespace oomlab
