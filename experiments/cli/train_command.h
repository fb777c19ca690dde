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

#include "engine/core/device.h"
#include "engine/core/tensor.h"
#include "engine/nn/checkpoint_plan.h"
#include "experiments/cli/model_arch.h"

namespace oomlab {

struct TrainConfig {
  std::string model = "resnet20";
  std::string dataset = "fashion-mnist";   // fashion-mnist | synthetic | synthetic-seq | synthetic-seg | npy
  std::string data_dir;                    // fashion-mnist's IDX files; npy: the .npy files (npy_dataset.h)
  Shape input;                             // synthetic / synthetic-seg: C,H,W (default: model's)
  int64_t num_classes = 10;                // synthetic / synthetic-seg (synthetic-seq: always 2; npy: 0 = infer)
  // synthetic-seq (token models): ModelConfig.seq_len and the longest regular sample;
  // lengths are uniform in [seq_min_len (0: seq_len/2), seq_len]; with probability
  // long_seq_prob a sample has length long_seq_len instead.
  int64_t seq_len = 32, seq_min_len = 0, long_seq_len = 0;
  double long_seq_prob = 0.0;
  // bert-* / unet* architecture overrides; seq_len and long_seq_len (when used) must fit
  // the position table (arch.max_positions, else the preset's 512): never enlarged silently.
  ArchOverrides arch;
  int64_t synthetic_size = 2048;
  Device device = cpu_device();
  int64_t batch = 128;
  int64_t epochs = 1;
  int64_t steps = 0;                       // > 0: stop after this many steps (overrides epochs)
  // The recipe: unset = the model family's default (recipes.h).
  std::optional<std::string> optimizer;
  std::optional<double> lr, momentum, weight_decay;
  std::optional<std::string> schedule;     // see engine/optim/lr_schedule.h and trainer.h
  bool nesterov = false;
  double ema_decay = 0.0;                  // 0 = off; e.g. 0.999
  std::string lr_groups;                   // --lr-groups text (parse_lr_groups)
  std::string tta = "none";                // --tta
  uint64_t seed = 0;
  bool shuffle = true;                     // --no-shuffle: every epoch visits samples 0, 1, 2, ...
  // --init FILE.safetensors: start from these weights (a PyTorch state_dict saved with
  // safetensors.torch.save_file); strict unless --init-non-strict, which loads what matches
  // and lists the rest (results `init`). Names, shapes and dtypes as PyTorch's state_dict.
  std::string init;
  bool init_strict = true;
  uint64_t device_memory = 0;              // emulated capacity; 0 = unlimited
  std::string save_dir, resume_dir;
  int64_t save_every = 0;                  // steps between checkpoints (0: only at the end)
  int64_t eval_batches = -1;               // -1: full test set
  int64_t log_every = 50;
  bool quiet = false;
  bool stop_on_nan = true;                 // --on-nan stop|continue (trainer.h)
  bool record_history = false;             // keep allocator trace + op spans for export
  CheckpointPolicy checkpoint;             // --checkpoint, parsed once (engine/nn/checkpoint_plan.h)
  std::string amp = "off";                 // --amp off|fp16|bf16 (engine/autograd/autocast.h)
  std::string loss_scale = "none";         // canonical --loss-scale (engine/train/mixed_precision.h)
  bool half = false;                       // --half (engine/train/half_mode.h)
  int64_t accumulate = 1;                  // --accumulate K (engine/train/accumulation.h)
  bool master_weights = false;             // --master-weights
  // --on-oom raise|skip|split (engine/train/oom_recovery.h). split is checked up front on a
  // capped device: one sample of the longest batch must fit (meta probe), else ValueError.
  std::string on_oom = "raise";
  int workers = 1;                         // --workers N (DataLoader threads; 0: synchronous)
  bool pin_memory = false;                 // --pin-memory (page-locked batches on accelerators)
  bool cuda_graphs = false;                // --cuda-graphs (engine/train/graphed_step.h)
  bool channels_last = false;              // --channels-last (engine/train/channels_last.h)
  // Data parallelism (parallel_train.h): --parallel none|dp|bdp|ddp over --devices N logical
  // devices from --device's index on (meta:0..N-1 for --device meta); --gpu0-bsz for bdp
  // (per optimizer step); --bucket-cap and --sync-bn for ddp; --backend for ddp processes
  // under a launcher (gloo, mpi, nccl; default gloo, nccl on cuda).
  std::string parallel = "none";
  int64_t devices = 1;
  int64_t gpu0_bsz = -1;
  int64_t bucket_cap = int64_t(25) << 20;
  bool sync_bn = false;
  double timeout_s = 300;                  // --timeout: the ddp rendezvous's and each collective's bound
  std::string backend;
};

// Everything train() checks before any work, without allocating or reading data: the model
// fits the dataset and its architecture flags, sequences fit the position table, the recipe
// resolves (optimizer, schedule, lr > 0; --momentum / --nesterov only with SGD), the
// Fashion-MNIST files exist, the batch fits the training set, --save DIR can be written and
// --resume names something. ValueError / IoError naming the flag.
void check_train_config(const TrainConfig& cfg);

// Runs training; returns the results JSON (make_results("train", ...)). A diverged run
// (stop_on_nan) returns its results with metrics.diverged_at_step (trainer.h).
nlohmann::json train(const TrainConfig& cfg);

}  // namespace oomlab
