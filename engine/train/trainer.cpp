// trainer.cpp — train_model (trainer.h): the checks of a TrainerConfig, then a TrainingRun
// (training_run.h) set up in named steps (precision, optimizer, loader and schedule, the
// strategies of every step) and its results. The loop itself, resume and checkpoints are in
// training_loop.cpp.
#include "engine/train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>

#include "engine/autograd/grad_mode.h"
#include "engine/core/backend.h"
#include "engine/core/checked_math.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/data/dataloader.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/pinned_host.h"
#include "engine/optim/ema.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/train/accumulation.h"
#include "engine/train/channels_last.h"
#include "engine/train/checkpoint.h"
#include "engine/parallel/data_parallel.h"
#include "engine/train/ddp_strategy.h"
#include "engine/train/evaluation.h"
#include "engine/train/half_mode.h"
#include "engine/train/results.h"
#include "engine/train/train_step.h"
#include "engine/train/trainer_state.h"
#include "engine/train/training_run.h"

namespace oomlab {
using json = nlohmann::json;

void check_batch_fits(int64_t batch, int64_t accumulate, const std::string& set, int64_t set_size) {
  OOMLAB_CHECK(batch >= 1 && accumulate >= 1, "a step needs a batch of at least 1 sample and at least 1 micro-batch "
               "(got a batch of ", batch, " and ", accumulate, " micro-batches)");
  OOMLAB_CHECK(batch <= set_size, "impossible batch: a batch of ", batch, " samples is larger than the ", set,
               " training set (", set_size, " samples)");
  const int64_t step_samples = checked_mul(batch, accumulate, "batch x micro-batches per step");
  OOMLAB_CHECK(accumulate == 1 || step_samples <= set_size, "accumulating ", accumulate, " micro-batches of ", batch,
               " needs ", step_samples, " samples per step, more than the ", set_size / batch, " batches of ", batch,
               " in an epoch of the ", set, " training set (", set_size, " samples)");
}

std::string resolve_schedule(const std::string& spec, int64_t total_steps) {
  if (spec == "cosine") return "cosine:t_max=" + std::to_string(total_steps);
  if (spec == "warmup-cosine") {   // a run of one step has no room to warm up
    const int64_t warmup = total_steps >= 2 ? std::max<int64_t>(1, total_steps / 10) : 0;
    return "warmup-cosine:warmup=" + std::to_string(warmup) +
           ",t_max=" + std::to_string(std::max(total_steps, warmup + 1));
  }
  return spec;
}

json train_model(nn::Module& model, const Dataset& train_set, const Dataset& test_set, const TrainerConfig& c) {
  check_batch_fits(c.batch, c.accumulate, train_set.name(), train_set.size());
  TrainingRun run(model, train_set, test_set, c);
  return run.run();
}

TrainingRun::TrainingRun(nn::Module& model, const Dataset& train_set, const Dataset& test_set, const TrainerConfig& c)
    : c_(c), train_set_(train_set), test_set_(test_set), model_(&model),
      forward_model_(c.forward_module ? c.forward_module : &model) {
  rank_ = c.ddp ? c.ddp->queue().rank() : 0;
  world_ = c.ddp ? c.ddp->queue().world_size() : 1;
  quiet_ = c.quiet || rank_ != 0;
  step_samples_ = c.batch * c.accumulate;   // checked by check_batch_fits
  if (c.ddp) device_generator(c.device).set_state(Generator{c.seed, 0});   // ranks may be threads: own device only
  else manual_seed(c.seed);
  model_->train();
  set_up_precision();
  if (c.channels_last) channels_last_model(*model_);
  make_optimizer();
  make_loader_and_schedule();
  if (c.ema_decay > 0) ema_ = std::make_unique<WeightEma>(parameters_and_buffers(*model_), c.ema_decay);
  history_ = {{"train_loss", json::array()}, {"lr", json::array()}, {"epochs", json::array()},
              {"skipped", json::array()}, {"oom_splits", json::array()}};
  assemble_strategies();
}

void TrainingRun::set_up_precision() {
  if (!c_.half) return;
  half_model(*model_, DType::f16);   // (a DDP rank's model is already half: its buckets are)
  half_io_.emplace(DType::f16, c_.master_weights);
  const bool zero = c_.ddp && c_.ddp->zero_stage() > 0;   // ZeRO's shards are the masters
  if (c_.master_weights && !zero) masters_.emplace(*model_);
}

size_t lr_group_of(const std::vector<std::pair<std::string, double>>& lr_groups, const std::string& name) {
  for (size_t i = 0; i < lr_groups.size(); ++i)
    if (name.rfind(lr_groups[i].first, 0) == 0) return i + 1;
  return 0;
}

void TrainingRun::make_optimizer() {
  ParamGroup base;
  base.lr = c_.lr;
  base.momentum = c_.optimizer == "sgd" ? c_.momentum : 0.0;
  base.weight_decay = c_.weight_decay;
  base.nesterov = c_.nesterov;
  std::vector<ParamGroup> groups(1 + c_.lr_groups.size(), base);
  for (size_t i = 0; i < c_.lr_groups.size(); ++i) groups[i + 1].lr = c_.lr * c_.lr_groups[i].second;
  std::vector<bool> used(groups.size(), false);
  for (const auto& [name, t] : model_->named_parameters()) used[lr_group_of(c_.lr_groups, name)] = true;
  for (size_t i = 0; i < c_.lr_groups.size(); ++i)
    OOMLAB_CHECK(used[i + 1], "lr group '", c_.lr_groups[i].first, "': no parameter of ",
                 c_.config.value("model", std::string("the model")), " has a name starting with it");
  if (c_.ddp && c_.ddp->zero_stage() > 0) {   // the optimizer updates the rank's shards, each of one group
    const std::vector<size_t> of = c_.ddp->zero_shard_groups();
    const nn::NamedTensors shards = c_.ddp->optimizer_parameters();
    for (size_t i = 0; i < shards.size(); ++i) groups.at(of[i]).params.push_back(shards[i]);
  } else {
    for (auto& [name, t] : masters_ ? masters_->parameters() : model_->named_parameters())
      groups[lr_group_of(c_.lr_groups, name)].params.push_back({name, t});
  }
  opt_ = ::oomlab::make_optimizer(c_.optimizer, groups);
}

// One loader batch per optimizer step: K micro-batches of --batch, in the order of a K*B batch.
void TrainingRun::make_loader_and_schedule() {
  loader_ = std::make_unique<DataLoader>(train_set_, step_samples_, /*shuffle=*/c_.shuffle, /*drop_last=*/true,
                                         c_.seed, c_.workers);
  if (world_ > 1) loader_->set_shard(rank_, world_);   // DistributedSampler
  pin_ = c_.pin_memory && has_pinned_host_memory(c_.device);
  if (c_.pin_memory && !pin_)
    std::cerr << "warning: pinned memory asked for, but device " << c_.device.str()
              << " has no pinned host memory; batches stay in pageable memory\n";
  if (pin_) loader_->set_pinner([dev = c_.device](size_t n) { return pinned_host_alloc(dev, n); });
  total_steps_ = c_.steps > 0 ? c_.steps
                              : checked_mul(c_.epochs, loader_->batches_per_epoch(), "epochs x batches per epoch");
  const std::string spec = resolve_schedule(c_.schedule, total_steps_);
  sched_ = std::make_unique<LrScheduler>(*opt_, parse_lr_schedule(spec));
  run_cfg_ = c_.config;
  run_cfg_["resolved_schedule"] = spec;
}

// The order of the step's strategies: accumulation, DDP (before unscaling / clipping), the
// caller's, autocast, half I/O, master weights (before the scaler: it unscales their grads),
// the loss scaler, OOM recovery.
void TrainingRun::assemble_strategies() {
  strategies_ = c_.strategies;
  if (c_.accumulate > 1) strategies_.insert(strategies_.begin(), &accumulation_.emplace(c_.accumulate));
  if (c_.ddp) strategies_.insert(strategies_.begin() + (c_.accumulate > 1 ? 1 : 0), &ddp_strategy_.emplace(*c_.ddp));
  if (c_.amp) strategies_.push_back(&autocast_.emplace(*c_.amp));
  if (half_io_) strategies_.push_back(&*half_io_);
  if (masters_) strategies_.push_back(&*masters_);
  if (c_.loss_scale.kind != LossScaleSpec::Kind::none) {
    strategies_.push_back(&scaler_.emplace(c_.loss_scale));
    if (c_.ddp && c_.ddp->zero_stage() > 0)   // each rank unscales only its shards
      scaler_->set_found_inf_reduction([ddp = c_.ddp](Tensor& flag) {
        // --offload: the shards' flag is on the host
        Tensor on_rank = flag.device() == ddp->queue().device() ? flag : copy_to_device(flag, ddp->queue().device());
        ddp->queue().run([&](Communicator& comm) { comm.all_reduce(on_rank, ReduceOp::max); });
        if (on_rank.impl() != flag.impl()) flag.copy_(on_rank);
      });
    history_["loss_scale"] = json::array();
    history_["found_inf_steps"] = json::array();
  }
  oom_recovery_ = std::make_unique<OomRecovery>(c_.on_oom);
  strategies_.push_back(oom_recovery_.get());
  train_step_ = std::make_unique<TrainStep>(*forward_model_, *opt_, strategies_);
  if (c_.cuda_graphs) graphed_ = std::make_unique<GraphedStep>(*train_step_, c_.device);
}

json TrainingRun::run() {
  if (!c_.resume_dir.empty()) resume();
  check_checkpoint_slots();
  train_epochs();
  const bool stopped = !divergence_.is_null() && c_.stop_on_nan;
  if (epoch_samples_ > 0 || history_["epochs"].empty()) end_epoch(loader_->epoch());
  // A run stopped by divergence keeps its last good checkpoint: its weights are not finite.
  if (!c_.save_dir.empty() && !stopped) checkpoint();
  return results();
}

json TrainingRun::oom_metrics() const {
  int64_t lost = 0;
  for (const json& e : history_["skipped"]) lost += e.value("samples", int64_t(0));
  const int64_t seen = checked_mul(step_, step_samples_, "steps x samples per step") + lost;
  return {{"policy", on_oom_name(c_.on_oom)}, {"skipped_batches", history_["skipped"].size()},
          {"samples_lost", lost}, {"samples_lost_pct", seen ? 100.0 * double(lost) / double(seen) : 0.0},
          {"split_batches", history_["oom_splits"].size()}};
}

json TrainingRun::ddp_metrics() const {
  json m = c_.ddp->stats().to_json();
  m["world_size"] = world_;
  m["rank"] = rank_;
  m["backend"] = c_.ddp->queue().comm().backend();
  m["global_batch"] = step_samples_ * world_;
  m["bucket_bytes"] = c_.ddp->bucket_bytes();
  m["bytes_sent"] = c_.ddp->queue().comm().stats().bytes_sent;
  return m;
}

json TrainingRun::results() {
  // Steady-state timing: drop the first step (allocator warm-up) when we have more.
  std::vector<double> steady(step_times_.size() > 1 ? step_times_.begin() + 1 : step_times_.begin(), step_times_.end());
  const json times = summarize_times(steady);
  const double med = times["median"].get<double>();
  json metrics = {{"steps", step_}, {"history", history_}, {"step_time_s", times},
                  {"images_per_s", med > 0 ? double(step_samples_) * world_ / med : 0.0},
                  {"train_seconds", train_seconds_}, {"pin_memory", pin_}, {"oom", oom_metrics()}};
  if (!history_["epochs"].empty()) {
    const json& last = history_["epochs"].back();
    metrics["final_test_accuracy"] = last["test_accuracy"];
    if (last.contains("test_accuracy_raw")) metrics["final_test_accuracy_raw"] = last["test_accuracy_raw"];
  }
  if (!divergence_.is_null()) {
    metrics["diverged_at_step"] = divergence_["step"];
    metrics["diverged_loss"] = divergence_["loss"];
    metrics["stopped_on_nan"] = c_.stop_on_nan;
  }
  if (c_.ddp) metrics["ddp"] = ddp_metrics();
  if (graphed_) metrics["cuda_graphs"] = graphed_->metrics();
  const std::vector<Device> devices = c_.devices.empty() ? std::vector<Device>{c_.device} : c_.devices;
  return make_results("train", devices, run_cfg_, metrics, "the whole run");
}

}  // namespace oomlab
