// train_command.h — `oomlab train` as a library call: resolves a model and datasets by
// name, the model family's default recipe (recipes.h) and the device set-up, then runs the
// engine's trainer (engine/train/trainer.h) on them.
// Contracts:
//  * Unset optimizer / lr / momentum / weight_decay / schedule take the model family's
//    defaults; results `config` records the resolved values and the recipe they came from.
//  * The device's allocators are reset, capped at device_memory (0 = unlimited) and, with
//    record_history, record their trace and op spans (read them after train() returns).
//  * A model that does not fit the dataset (tokens vs images, segmentation vs
//    classification), a batch larger than the training set or a sequence longer than the
//    position table is a ValueError naming both sides, before any work.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "experiments/plan/run_spec.h"

namespace oomlab {

// Everything train() checks before any work, without allocating or reading data: the model
// fits the dataset and its architecture flags, sequences fit the position table, the recipe
// resolves (optimizer, schedule, lr > 0; --momentum / --nesterov only with SGD), the
// Fashion-MNIST files exist, the batch fits the training set, --save DIR can be written and
// --resume names something. ValueError / IoError naming the flag.
void check_train_config(const RunSpec& cfg);

// Runs training; returns the results JSON (make_results("train", ...)). A diverged run
// (stop_on_nan) returns its results with metrics.diverged_at_step (trainer.h).
nlohmann::json train(const RunSpec& cfg);

}  // namespace oomlab
