// checkpoint.h — crash-safe training checkpoints.
// Layout: DIR/step-<N>/{model.safetensors, trainer_state.safetensors, trainer_state.json}
// and DIR/latest (text: "step-<N>"). A checkpoint is written under DIR/.tmp-step-<N>,
// fsynced and renamed into place; only then is `latest` replaced (atomically), and
// checkpoints older than the last `keep` are removed. Loading validates every tensor's
// name, shape and dtype and the files' CRC32; any problem is an IoError/ValueError
// naming the file.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "engine/io/safetensors.h"

namespace oomlab {

struct CheckpointData {
  NamedTensors model;     // parameters + buffers (state_dict names)
  NamedTensors trainer;   // optimizer state, EMA weights
  nlohmann::json state;   // step, loader, rng, optimizer/scheduler json, history, config
};

// Writes checkpoint `step` under dir; returns its directory.
std::string save_checkpoint(const std::string& dir, int64_t step, const CheckpointData& data, int keep = 2);

// Resolves `path` (a checkpoint directory, or a save directory holding `latest`) and
// loads model tensors into data.model (strict), returns the trainer tensors and state.
struct LoadedCheckpoint {
  std::string path;
  NamedTensors trainer;
  nlohmann::json state;
};
LoadedCheckpoint load_checkpoint(const std::string& path, const NamedTensors& model_targets);

}  // namespace oomlab
