// trainer.h — the training loop: a Module, its train/test Datasets and a TrainerConfig in,
// a results JSON out (evaluation, metrics, checkpoints, bit-exact resume). It never
// builds a model or a dataset by name: the application does (experiments/cli).
// Contracts:
//  * The model lives on config.device already; the device's allocator (capacity, trace
//    recording) is set up by the caller before the model was built. The trainer seeds
//    the device's RNG with config.seed (dropout), then restores it on resume.
//  * Steps run through TrainStep (train_step.h: the same phases estimate/experiments
//    measure). Checkpoints are taken only at optimizer-step boundaries; a checkpoint
//    directory is written whole under a temporary name and renamed, then `latest` is
//    replaced atomically, so a crash leaves the previous checkpoint intact.
//  * Resuming reproduces the uninterrupted run bit-exactly on CPU (weights, optimizer,
//    schedule, EMA, RNG and data position are restored). config.config is recorded in
//    results and checkpoints; a checkpoint whose config differs on any of
//    config.resume_keys is refused before any weights load.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/data/dataset.h"
#include "engine/nn/module.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/train/mixed_precision.h"
#include "engine/train/oom_recovery.h"
#include "engine/train/train_step.h"

namespace oomlab {

struct TrainerConfig {
  Device device = cpu_device();
  int64_t batch = 128;                     // the micro-batch when accumulate > 1
  // Gradient accumulation (accumulation.h): each optimizer step takes `accumulate`
  // consecutive micro-batches of `batch` samples (one loader batch of batch x accumulate, so
  // the sample order does not depend on it); steps and epochs count optimizer steps,
  // images_per_s counts samples.
  int64_t accumulate = 1;
  int64_t epochs = 1;
  // DataLoader threads building batches (PyTorch's num_workers; 0: in the training loop).
  // The batches, and so the run, are the same for any number.
  int workers = 1;
  // --pin-memory (PyTorch's pin_memory): the loaders copy each batch into page-locked host
  // memory and the inputs go to the device with one asynchronous copy each (pinned_host.h).
  // A device without pinned memory (cpu, meta) keeps pageable batches and says so on stderr,
  // as PyTorch warns; metrics.pin_memory records whether batches were pinned.
  bool pin_memory = false;
  int64_t steps = 0;                       // > 0: stop after this many steps (overrides epochs)
  // Optimizer and schedule (engine/optim): sgd | adam | adamw; schedule as in lr_schedule.h,
  // plus "cosine" and "warmup-cosine" without parameters, which span the whole run
  // (warmup-cosine: the first 10% of the steps warm up, at least one).
  std::string optimizer = "sgd";
  double lr = 0.1, momentum = 0.9, weight_decay = 5e-4;
  bool nesterov = false;
  std::string schedule = "cosine";
  double ema_decay = 0.0;                  // 0 = off; e.g. 0.999; evaluation swaps the EMA in, and the
                                           // epoch's line also gets the raw weights' test_accuracy_raw
  // Parameter groups (torch.optim's param_groups): each (name prefix, lr factor) takes the
  // parameters whose name starts with the prefix (first match wins) into a group of its own
  // at lr x factor; the rest stay in group 0 at lr. The schedule scales every group's own
  // base lr (LambdaLR); history.lr_groups holds each group's lr per step when there are
  // groups. A prefix that matches no parameter is a ValueError naming it.
  std::vector<std::pair<std::string, double>> lr_groups;
  // Test-time augmentation: evaluation averages the softmax of the inputs and of their
  // mirror image (width flipped) and scores that (classification only).
  bool tta_flip = false;
  uint64_t seed = 0;                       // data order and the device RNG
  bool shuffle = true;                     // false: every epoch visits samples 0, 1, 2, ... (DataLoader)
  std::string save_dir, resume_dir;
  int64_t save_every = 0;                  // steps between checkpoints (0: only at the end)
  int64_t eval_batches = -1;               // -1: full test set; 0: no evaluation
  int64_t log_every = 50;
  bool quiet = false;
  // A non-finite training loss (divergence): true stops after that step, false goes on.
  // Either way the loss is recorded as null in history.train_loss (strict JSON), left out
  // of the epoch sums, and metrics get diverged_at_step (1-based), diverged_loss ("nan",
  // "inf", "-inf") and stopped_on_nan; a stopped run writes no final checkpoint (its
  // weights are not finite: the last good one stays `latest`).
  bool stop_on_nan = true;
  std::vector<StepStrategy*> strategies;   // techniques plugged into every step (train_step.h)
  // Mixed precision (mixed_precision.h): the forward, loss and evaluation run under autocast
  // with this dtype; a loss scale other than none adds a GradScaler after `strategies`. The
  // scale used by each step goes into history.loss_scale, the steps whose update was skipped
  // for an inf / NaN gradient into history.found_inf_steps (1-based), and the scaler's state
  // into checkpoints (trainer_state.json "grad_scaler").
  std::optional<DType> amp;
  LossScaleSpec loss_scale;
  // --half (half_mode.h): the trainer converts the model with half_model(float16) (BatchNorm
  // stays float32), casts inputs to float16 for training and evaluation, and the optimizer
  // updates the float16 parameters. master_weights (needs half) adds float32 masters that the
  // optimizer updates instead, float32 logits for the loss, and the masters in checkpoints
  // (trainer_state.safetensors "master.<name>"). Loss scaling with half needs master_weights;
  // half excludes amp.
  bool half = false;
  bool master_weights = false;
  // --channels-last (channels_last.h): the model's 4-D parameters and buffers re-laid out as
  // channels_last after any --half conversion and before the optimizer exists, and each 4-D
  // training batch re-laid out on the device before its step (the NCHW copy freed first;
  // under cuda_graphs the static input stays NCHW and the first convolution lays it out).
  bool channels_last = false;
  // --on-oom (oom_recovery.h): skipped batches go into history.skipped ({after_step, phase,
  // samples, reason}), split ones into history.oom_splits ({step, micro_batches}); metrics.oom
  // sums them (skipped_batches, samples_lost, samples_lost_pct, split_batches). An OOM that
  // propagates names the step and the batch's shape. metrics.train_seconds is the wall time
  // of every training batch (skipped ones and failed attempts included, evaluation not).
  // Evaluation follows the policy too: a test batch that does not fit is halved (split) or
  // left out and counted in the epoch's test_samples_skipped (skip).
  OnOom on_oom = OnOom::raise;
  // Data parallelism (engine/parallel). forward_module: what runs forward in training and
  // evaluation when it is not the trained model itself (a DataParallel around it; the
  // optimizer, checkpoints and EMA keep to the model). devices: every logical device whose
  // allocator goes into the results' memory (empty: device).
  nn::Module* forward_module = nullptr;
  std::vector<Device> devices;
  // DDP: this trainer is one rank and ddp the model's reducer (its queue is the rank's
  // communicator). The training set is sharded (DataLoader::set_shard, DistributedSampler),
  // batch is per rank; evaluation runs on each rank's shard of the test set (padding left
  // out) and the metric sums and confusion matrix are all-reduced, so every rank reports the
  // single-device figures. Only rank 0 prints and writes checkpoints; all ranks then meet at
  // a barrier. A checkpoint resumes on another world size at the same global batch (batch x
  // world: the loader's cursor then counts the same global batches). --on-oom must be raise.
  DistributedDataParallel* ddp = nullptr;
  // CUDA graphs (graphed_step.h): after GraphedStep::kWarmupSteps eager steps the step is
  // captured once and replayed; device cuda (or meta: the graph's memory). The caller keeps
  // what a replay would freeze constant: one device, on_oom raise, no loss
  // scaling, batches of one shape (schedules and SGD / Adam / AdamW replay with each step's
  // constants: graphed_step.h). Train accuracy is not counted (null);
  // metrics.cuda_graphs holds warmup_steps, captured_at_step, replays and
  // graph_pool_reserved_bytes.
  bool cuda_graphs = false;
  nlohmann::json config = nlohmann::json::object();   // the run's description (results, checkpoints)
  std::vector<std::string> resume_keys;               // keys of `config` a checkpoint must match
};

// The schedule spec a run uses: "cosine" -> "cosine:t_max=<total_steps>", "warmup-cosine"
// -> "warmup-cosine:warmup=<max(1, total/10)>,t_max=<total_steps>" (warmup 0 for a single
// step), others unchanged.
std::string resolve_schedule(const std::string& spec, int64_t total_steps);

// A step of `accumulate` micro-batches of `batch` samples fits an epoch of the `set`
// training set of `set_size` samples (drop_last): ValueError naming the numbers otherwise.
// The trainer checks it once the data is loaded; the CLI before loading when it knows the size.
void check_batch_fits(int64_t batch, int64_t accumulate, const std::string& set, int64_t set_size);

// The optimizer group of parameter `name` under TrainerConfig::lr_groups: 1 + the first
// prefix it starts with, else 0 (ZeRO cuts its shards by it: distributed_data_parallel.h).
size_t lr_group_of(const std::vector<std::pair<std::string, double>>& lr_groups, const std::string& name);

// Trains `model` in place; returns make_results("train", ...) with config.config as its config
// (plus "resolved_schedule").
nlohmann::json train_model(nn::Module& model, const Dataset& train_set, const Dataset& test_set,
                           const TrainerConfig& config);

}  // namespace oomlab
