// run_spec.h — one run of oomlab, typed: what `train`, `summary` and `estimate` are asked
// to do, built once from the command line at the edge (experiments/cli/run_spec_flags.h)
// or written directly by tests and library callers. Every value is parsed where it is made
// (policies, sizes, precisions, modes): nothing below the edge parses flag text again.
// The planner (memory_report.h, largest_batch.h) reads the model, precision and technique
// fields; `train` (experiments/train) reads all of them and gives the engine its
// TrainerConfig (engine/train/trainer.h).
// Contracts:
//  * Unset recipe fields (optimizer, lr, momentum, weight_decay, schedule) take the model
//    family's defaults when training (experiments/train/recipes.h); the planner takes SGD
//    with momentum 0.9 unless told.
//  * num_classes and seq_len: the run's data for `train` (10 classes; 32-token sequences);
//    for the planner 0 means the model's own default (RunSpec::for_model sets both to 0).
//  * check_run_model_techniques: the rules between the model and the techniques that
//    `train` and `estimate` share (--cuda-graphs, --channels-last), ValueErrors in the
//    flags' words.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/parallel/zero_offload.h"
#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "engine/nn/checkpoint_plan.h"
#include "engine/train/mixed_precision.h"
#include "engine/train/oom_recovery.h"
#include "experiments/plan/model_arch.h"

namespace oomlab {

// --parallel: one device, DataParallel, balanced DataParallel, DistributedDataParallel.
enum class ParallelMode { none, dp, bdp, ddp };
ParallelMode parse_parallel_mode(const std::string& text);
const char* parallel_mode_name(ParallelMode mode);

// --lr-groups "NAME_PREFIX=FACTOR,...": each a parameter-name prefix (e.g. "fc." or
// "layer4.") and its lr factor (> 0, finite); prefixes unique. Empty text: no groups.
using LrGroups = std::vector<std::pair<std::string, double>>;
LrGroups parse_lr_groups(const std::string& text);
std::string lr_groups_text(const LrGroups& groups);   // the canonical text, "" for none

struct RunSpec {
  // The model and the shape of its input.
  std::string model = "resnet20";
  Shape input;                             // images: C,H,W (default: the model's)
  int64_t num_classes = 10;                // see the contracts above
  ArchOverrides arch;                      // --hidden ... --norm (checked against the model)
  // The data: fashion-mnist | synthetic | synthetic-seq | synthetic-seg | npy.
  std::string dataset = "fashion-mnist";
  std::string data_dir;                    // fashion-mnist's IDX files; npy: the .npy files (npy_dataset.h)
  // synthetic-seq (token models): the longest regular sample; lengths are uniform in
  // [seq_min_len (0: seq_len/2), seq_len]; with probability long_seq_prob a sample has
  // length long_seq_len instead. All must fit the position table (never enlarged silently).
  int64_t seq_len = 32, seq_min_len = 0, long_seq_len = 0;
  double long_seq_prob = 0.0;
  int64_t synthetic_size = 2048;
  bool shuffle = true;                     // --no-shuffle: every epoch visits samples 0, 1, 2, ...
  // The device, emulated capacity (0 = unlimited) and the run's length.
  Device device = cpu_device();
  uint64_t device_memory = 0;
  int64_t batch = 128;                     // the micro-batch (per rank under ddp)
  int64_t accumulate = 1;                  // --accumulate K (engine/train/accumulation.h)
  int64_t epochs = 1;
  int64_t steps = 0;                       // > 0: stop after this many steps (overrides epochs)
  // The recipe (see the contracts above).
  std::optional<std::string> optimizer;    // sgd | adam | adamw
  std::optional<double> lr, momentum, weight_decay;
  std::optional<std::string> schedule;     // see engine/optim/lr_schedule.h and trainer.h
  bool nesterov = false;
  double ema_decay = 0.0;                  // 0 = off; e.g. 0.999
  LrGroups lr_groups;                      // --lr-groups
  bool tta_flip = false;                   // --tta flip
  uint64_t seed = 0;
  // --init FILE.safetensors: start from these weights (a PyTorch state_dict saved with
  // safetensors.torch.save_file); strict unless --init-non-strict.
  std::string init;
  bool init_strict = true;
  std::string save_dir, resume_dir;
  int64_t save_every = 0;                  // steps between checkpoints (0: only at the end)
  int64_t eval_batches = -1;               // -1: full test set
  int64_t log_every = 50;
  bool quiet = false;
  bool stop_on_nan = true;                 // --on-nan stop|continue (trainer.h)
  bool record_history = false;             // keep allocator trace + op spans for export
  // The techniques.
  CheckpointPolicy checkpoint;             // --checkpoint (engine/nn/checkpoint_plan.h)
  std::optional<DType> amp;                // --amp fp16|bf16; nullopt: off (engine/autograd/autocast.h)
  LossScaleSpec loss_scale;                // --loss-scale, resolved (engine/train/mixed_precision.h)
  bool half = false;                       // --half (engine/train/half_mode.h)
  bool master_weights = false;             // --master-weights
  OnOom on_oom = OnOom::raise;             // --on-oom (engine/train/oom_recovery.h)
  int workers = 1;                         // --workers N (DataLoader threads; 0: synchronous)
  bool pin_memory = false;                 // --pin-memory
  bool cuda_graphs = false;                // --cuda-graphs (engine/train/graphed_step.h)
  bool channels_last = false;              // --channels-last (engine/train/channels_last.h)
  // Data parallelism (experiments/train/parallel_train.h): --devices N logical devices from
  // --device's index on; --gpu0-bsz for bdp (per optimizer step); --bucket-cap and
  // --sync-bn for ddp; --backend for ddp processes (gloo, mpi, nccl; "" = the default).
  ParallelMode parallel = ParallelMode::none;
  int64_t devices = 1;
  int64_t gpu0_bsz = -1;
  int64_t bucket_cap = int64_t(25) << 20;
  int zero_stage = 0;                      // --zero 1|2: ZeRO's optimizer-state (1) and gradient (2) shards
  ZeroOffload offload = ZeroOffload::none;  // --offload optimizer|params (with --zero)
  bool sync_bn = false;
  double timeout_s = 300;                  // --timeout: the ddp rendezvous's and each collective's bound
  std::string backend;

  // The model with its own defaults, for the planner: classes and sequence length 0.
  static RunSpec for_model(const std::string& model);
  const char* amp_text() const;            // "off", "fp16", "bf16"
};

void check_run_model_techniques(const RunSpec& spec);

// --zero with what its shards cannot carry yet (with stage 3: imported graphs, channels-last
// and EMA), --offload without the stage it needs: a ValueError naming it.
void check_zero_supported(const RunSpec& spec);

}  // namespace oomlab
