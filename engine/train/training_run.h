// training_run.h — train_model (trainer.h) as one object whose steps have names: the run's
// pieces are built in order (precision, optimizer and loader, strategies), then resume,
// the epoch loop (one optimizer step per loader batch), checkpoints, the end of each epoch,
// and the results. Internal to engine/train: trainer.cpp (set-up, results) and
// training_loop.cpp (resume, loop, checkpoints, epochs) implement it.
// Contracts: those of trainer.h; members are built in declaration order and the strategies
// point into members of this object, which therefore never moves.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/dataloader.h"
#include "engine/optim/ema.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/train/accumulation.h"
#include "engine/train/ddp_strategy.h"
#include "engine/train/checkpoint.h"
#include "engine/train/graphed_step.h"
#include "engine/train/half_mode.h"
#include "engine/train/trainer.h"
#include "engine/train/trainer_state.h"

namespace oomlab {

// Parameters then buffers: what checkpoints and EMA hold.
inline NamedTensors parameters_and_buffers(nn::Module& m) {
  NamedTensors s = m.named_parameters();
  for (auto& b : m.named_buffers()) s.push_back(b);
  return s;
}

class TrainingRun {
 public:
  TrainingRun(nn::Module& model, const Dataset& train_set, const Dataset& test_set, const TrainerConfig& c);
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;
  nlohmann::json run();

 private:
  // set-up (trainer.cpp)
  void set_up_precision();
  void make_optimizer();
  void make_loader_and_schedule();
  void assemble_strategies();
  nlohmann::json results();
  nlohmann::json oom_metrics() const;
  nlohmann::json ddp_metrics() const;
  // the run (training_loop.cpp)
  void resume();
  // zero3_params: ZeRO-3's parameter values as loaded (they go to this rank's shards)
  void restore_components(const LoadedCheckpoint& ck, const TrainerState& st, NamedTensors zero3_params);
  bool zero() const { return c_.ddp && c_.ddp->zero_stage() > 0; }   // the optimizer updates shards
  void train_epochs();
  bool copy_batch(Tensor& x, Tensor& y, StepOutput& out);   // false: skipped (--on-oom skip)
  void train_batch();   // one optimizer step (or a skipped batch)
  void record_skip(const StepOutput& out, double seconds);
  void record_step(const StepOutput& out, double loss, double seconds);
  void checkpoint();
  void check_checkpoint_slots() const;
  void end_epoch(int64_t epoch);

  const TrainerConfig& c_;
  const Dataset& train_set_;
  const Dataset& test_set_;
  nn::Module* model_;
  nn::Module* forward_model_;
  int rank_ = 0, world_ = 1;
  bool quiet_ = false;
  int64_t step_samples_ = 0;
  std::optional<HalfIO> half_io_;
  std::optional<MasterWeights> masters_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<DataLoader> loader_;
  bool pin_ = false;
  int64_t total_steps_ = 0;
  std::unique_ptr<LrScheduler> sched_;
  nlohmann::json run_cfg_;
  std::unique_ptr<WeightEma> ema_;
  nlohmann::json history_;
  std::vector<StepStrategy*> strategies_;
  std::optional<GradientAccumulation> accumulation_;
  std::optional<DdpStrategy> ddp_strategy_;
  std::optional<AutocastStrategy> autocast_;
  std::optional<GradScaler> scaler_;
  std::unique_ptr<OomRecovery> oom_recovery_;
  std::unique_ptr<TrainStep> train_step_;
  std::unique_ptr<GraphedStep> graphed_;   // cuda_graphs: the step captured and replayed
  // progress (checkpointed)
  int64_t step_ = 0;
  nlohmann::json divergence_;   // {"step", "loss"} of the first non-finite loss, once there was one
  double epoch_loss_ = 0;       // running sums of the current epoch
  int64_t epoch_correct_ = 0, epoch_samples_ = 0, epoch_scored_ = 0;   // scored: samples or pixels
  bool stop_ = false;           // a non-finite loss with stop_on_nan
  int64_t consecutive_skips_ = 0;   // batches skipped for memory since the last finished step
  // this process's measurements
  std::vector<std::string> written_checkpoints_;   // retention removes only these
  std::string resumed_from_;                        // the checkpoint resumed from: saving may replace it
  std::string run_id_ = new_run_id();               // in each checkpoint; a resumed run takes its checkpoint's
  std::vector<double> step_times_;
  double train_seconds_ = 0;   // training batches (skipped ones included), not evaluation
  HostBatch batch_;
};

}  // namespace oomlab
