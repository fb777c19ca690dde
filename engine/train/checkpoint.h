// checkpoint.h — crash-safe training checkpoints.
// Layout: DIR/step-<N>/{model.safetensors, trainer_state.safetensors, trainer_state.json}
// and DIR/latest (text: "step-<N>"). A checkpoint is written under DIR/.tmp-step-<N>,
// fsynced and renamed into place; only then is `latest` replaced (atomically), and
// checkpoints older than the last `keep` are removed. An existing DIR/step-<N> is
// replaced crash-safely: atomically exchanged with the new directory (renameat2
// RENAME_EXCHANGE), or where the filesystem cannot, renamed aside to .old-step-<N>-*
// first (loading falls back to that directory if step-<N> is missing), then deleted.
// Loading validates every tensor's name, shape and dtype and the files' CRC32 (the CRC32
// of trainer_state.json is kept in trainer_state.safetensors' metadata); any problem is
// an IoError/ValueError naming the file.
// Ownership: trainer_state.json's "run_id" says which run wrote a checkpoint (a resumed run
// keeps its id). A run replaces or removes only step folders it wrote, and a save directory
// resumes from the newest complete checkpoint of the run `latest` names, so a run killed
// after publishing step-N but before moving `latest` resumes from step-N. Retention renames
// a folder aside (.del-step-N-PID) before deleting it: a kill mid-delete leaves no partial
// step-N (the next save removes the leftover).
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"

namespace oomlab {

struct CheckpointData {
  NamedTensors model;     // parameters + buffers (state_dict names)
  NamedTensors trainer;   // optimizer state, EMA weights
  nlohmann::json state;   // step, loader, rng, optimizer/scheduler json, history, config
};

// Writes checkpoint `step` under dir; returns its directory. `written` (may be null: no
// retention) lists the checkpoints this run wrote, oldest first; it is updated, and those
// beyond the newest `keep` are removed. Checkpoints the run did not write are never
// removed, and the new one (named by `latest`) never is. Leftover temp directories of dead
// processes (.tmp-step-N-PID, .old-step-N-PID) are cleaned up; a save that fails removes
// its own temp directory. An existing step-N folder is replaced (crash-safely) only when
// this run wrote it (in `written`, or its run id is data.state's "run_id") or it is
// `replaceable` (the checkpoint the run resumed from): a user's folder or another run's
// checkpoint is an IoError, never replaced.
std::string save_checkpoint(const std::string& dir, int64_t step, const CheckpointData& data,
                            std::vector<std::string>* written, int keep = 2, const std::string& replaceable = "");

// The run that wrote the checkpoint folder `step_dir` (its trainer_state.json's "run_id"), or
// "" when the folder is not a complete checkpoint or names no run (a user's folder, an older
// oomlab's checkpoint).
std::string checkpoint_run_id(const std::string& step_dir);
// A new run's id: 16 hex digits from the random device, the time and the pid.
std::string new_run_id();
// The step-N folders under dir that run `run_id` wrote, complete, at most `up_to` (oldest
// first, as names "step-N"): what a resumed run's retention may remove.
std::vector<std::string> checkpoints_of_run(const std::string& dir, const std::string& run_id, int64_t up_to);

// The steps N of the step-N folders directly under dir (none when dir does not exist).
std::vector<int64_t> existing_checkpoint_steps(const std::string& dir);

// IoError when dir/step-N exists, is not `replaceable` and was not written by run `run_id`:
// this run would have to replace a folder it did not write. The wording save_checkpoint uses.
void check_checkpoint_slot_free(const std::string& dir, int64_t step, const std::string& replaceable,
                                const std::string& run_id = "");

// Metadata key of trainer_state.safetensors holding the CRC32 of trainer_state.json.
inline constexpr const char* kTrainerStateJsonCrcKey = "oomlab_trainer_state_json_crc32";

// Resolves `path` (a checkpoint directory; or a save directory: the checkpoint `latest`
// names, or a newer complete step-N of the same run (a kill before `latest` moved); without
// `latest`, its newest complete step-N) and
// loads model tensors into data.model (strict), returns the trainer tensors and state.
// check_state (optional) sees the parsed, checksum-verified state and the path of
// trainer_state.json before any weights are loaded (e.g. to compare the run's config).
struct LoadedCheckpoint {
  std::string path;
  NamedTensors trainer;
  nlohmann::json state;
};
LoadedCheckpoint load_checkpoint(
    const std::string& path, const NamedTensors& model_targets,
    const std::function<void(const nlohmann::json& state, const std::string& state_file)>& check_state = {});

}  // namespace oomlab
