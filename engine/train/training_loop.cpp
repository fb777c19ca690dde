// training_loop.cpp — the running part of a TrainingRun (training_run.h): resume from a
// checkpoint, the epoch loop (one optimizer step per loader batch, a skipped batch under
// --on-oom skip), the per-step history, checkpoints at step boundaries and the end of an
// epoch (evaluation, the epoch's sums). Contracts: trainer.h.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "engine/autograd/grad_mode.h"
#include "engine/core/backend.h"
#include "engine/core/checked_math.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/memory/caching_allocator.h"
#include "engine/train/evaluation.h"
#include "engine/train/training_run.h"

namespace oomlab {
using json = nlohmann::json;

namespace {
json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(); }

std::string four_places(const json& v) {   // a log line's figure; "n/a" where there is none
  if (!v.is_number()) return "n/a";
  char text[32];
  std::snprintf(text, sizeof text, "%.4f", v.get<double>());
  return text;
}
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

// The run's config must match the checkpoint's (checked before any weights load, so a
// different architecture is reported as such, not as missing tensors).
void TrainingRun::resume() {
  auto check_config = [&](const json& st, const std::string& file) {
    OOMLAB_CHECK_T(IoError, st.contains("config") && st["config"].is_object(), "resume: ", file,
                   ": field \"config\" is missing or not an object");
    const json& saved = st["config"];
    for (const std::string& k : c_.resume_keys) {
      OOMLAB_CHECK_T(IoError, saved.contains(k), "resume: ", file, ": field \"config.", k, "\" is missing");
      OOMLAB_CHECK(saved[k] == run_cfg_[k], "resume: checkpoint ", file, " was made with ", k, "=", saved[k].dump(),
                   ", this run has ", run_cfg_[k].dump());
    }
  };
  // ZeRO-3: the parameters' values land in scratch tensors, then in this rank's shards
  NamedTensors targets = parameters_and_buffers(*model_), zero3_params;
  if (zero() && c_.ddp->zero_stage() == 3)
    for (auto& [name, t] : targets)
      if (t.requires_grad()) zero3_params.push_back({name, t = Tensor::empty(t.shape(), t.dtype(), t.device())});
  LoadedCheckpoint ck = load_checkpoint(c_.resume_dir, targets, check_config);
  const TrainerState st = parse_trainer_state(ck.state, ck.path + "/trainer_state.json");
  OOMLAB_CHECK_T(
      IoError, !ema_ || st.ema.is_object(), "resume: ", ck.path,
      "/trainer_state.json: field \"ema\" is missing (this run keeps a weight EMA, the checkpoint's had none)");
  restore_components(ck, st, std::move(zero3_params));
  device_generator(c_.device).set_state(st.rng);
  history_ = st.history;
  divergence_ = st.divergence;
  OOMLAB_CHECK(st.step <= total_steps_, "resume: checkpoint ", ck.path, " is at step ", st.step,
               ", past this run's last step ", total_steps_, ": nothing would train (give more steps or epochs)");
  step_ = st.step;
  resumed_from_ = ck.path;
  // The same run goes on: its id, and its own checkpoints in the save folder, which retention
  // may remove as it would have without the restart (a checkpoint of an older oomlab has no id).
  if (ck.state.contains("run_id") && ck.state["run_id"].is_string()) run_id_ = ck.state["run_id"].get<std::string>();
  if (!c_.save_dir.empty()) written_checkpoints_ = checkpoints_of_run(c_.save_dir, run_id_, step_);
  epoch_loss_ = st.epoch_loss;
  epoch_correct_ = st.epoch_correct;
  epoch_samples_ = st.epoch_samples;
  epoch_scored_ = c_.cuda_graphs ? 0
                  : st.epoch_scored >= 0
                      ? st.epoch_scored
                      : checked_mul(epoch_samples_, train_set_.target_numel(), "resume: epoch_sums.samples");
  if (!quiet_) std::printf("resumed from %s at step %lld\n", ck.path.c_str(), (long long)step_);
}

// The optimizer, schedule, EMA, loader, master weights and loss scaler from a checkpoint;
// each component validates its own part, and an error says which checkpoint it came from.
void TrainingRun::restore_components(const LoadedCheckpoint& ck, const TrainerState& st, NamedTensors zero3_params) {
  NamedTensors opt_tensors, ema_tensors, master_tensors;
  for (auto& [n, t] : ck.trainer)
    (n.rfind("ema.", 0) == 0      ? ema_tensors
     : n.rfind("master.", 0) == 0 ? master_tensors
                                  : opt_tensors)
        .push_back({n, t});
  try {
    if (zero()) {   // DDP's format: this rank's shards of it
      const DistributedDataParallel::ZeroState z =
          c_.ddp->zero_shard({std::move(zero3_params), opt_tensors, master_tensors, st.optimizer});
      opt_->load_state(z.optimizer, z.optimizer_tensors);
    } else {
      opt_->load_state(st.optimizer, opt_tensors);
    }
    sched_->load_state(st.scheduler);
    if (ema_) {
      ema_->load_state(ema_tensors, st.ema);
      ema_->set_decay(c_.ema_decay);   // this run's --ema (the update count stays restored)
    }
    loader_->restore(st.loader);
    if (masters_) masters_->load_state(master_tensors);
    if (scaler_) {
      OOMLAB_CHECK_T(IoError, ck.state.contains("grad_scaler"), "resume: ", ck.path,
                     "/trainer_state.json: field \"grad_scaler\" is missing (this run scales the loss)");
      scaler_->load_state(ck.state["grad_scaler"]);
    }
  } catch (const ValueError& e) {
    throw ValueError(str_cat("resume: ", ck.path, ": ", e.what()));
  }
}

void TrainingRun::train_epochs() {
  while (step_ < total_steps_ && !stop_) {
    const int64_t epoch = loader_->epoch();
    if (!loader_->next(batch_)) {   // the loader moves itself to the next epoch
      end_epoch(epoch);
      continue;
    }
    train_batch();
  }
}

// The batch to the device; under --on-oom skip an out-of-memory error there skips the batch.
bool TrainingRun::copy_batch(Tensor& x, Tensor& y, StepOutput& out) {
  try {
    x = batch_input_to_device(batch_, c_.device);
    // --channels-last: the batch laid out so on the device and its NCHW copy freed before the
    // step, as PyTorch's recipe `x.to(device, memory_format=torch.channels_last)`: the first
    // convolution then saves this batch itself, not a channels_last copy of it.
    if (c_.channels_last && x.dim() == 4) {
      MemoryContext ctx("input", "channels_last");
      x = to_memory_format(x, MemoryFormat::channels_last);
    }
    y = batch_target_to_device(batch_, c_.device);
    return true;
  } catch (const OutOfMemoryError& e) {   // the step handles its own phases; this is the copy
    if (c_.on_oom != OnOom::skip) throw OutOfMemoryError(str_cat("copying a batch to the device: ", e.what()));
    out.skipped = true;
    out.skip_reason = str_cat("out of memory in input: ", e.what());
    out.skip_phase = "input";
    return false;
  }
}

void TrainingRun::train_batch() {
  const auto t0 = std::chrono::steady_clock::now();
  StepOutput out;
  if (graphed_) {   // static inputs, no OOM policy but raise (graphed_step.h)
    out = graphed_->run(batch_);
  } else {
    Tensor x, y;
    if (copy_batch(x, y, out)) {
      try {
        out = train_step_->run(x, y, /*track_memory=*/false);
      } catch (const OutOfMemoryError& e) {   // --on-oom raise (or split at its limit): say which batch
        throw OutOfMemoryError(
            str_cat("step ", step_ + 1, " (a batch of shape ", shape_str(x.shape()), "): ", e.what()));
      }
    }
  }   // the batch's tensors are freed before the step is timed
  if (out.skipped) {   // an OOM was handled: the batch is consumed, no update happened
    device_synchronize(c_.device);
    record_skip(out, seconds_since(t0));
    return;
  }
  if (out.oom_splits > 0) {
    history_["oom_splits"].push_back({{"step", step_ + 1}, {"micro_batches", out.micro_batches}});
    if (!quiet_)
      std::printf("step %lld: out of memory, retried as %lld micro-batches\n", (long long)step_ + 1,
                  (long long)out.micro_batches);
  }
  const double loss = c_.device.is_meta() ? 0.0 : out.loss.item();   // meta: no value (recorded as null)
  if (!std::isfinite(loss) && divergence_.is_null()) {
    divergence_ = {{"step", step_ + 1}, {"loss", std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf"}};
    std::printf("step %lld: the loss is %s: diverged (%s)\n", (long long)step_ + 1,
                divergence_["loss"].get<std::string>().c_str(),
                c_.stop_on_nan ? "stopping: the run stops on a non-finite loss"
                               : "going on: the run continues past non-finite losses");
  }
  sched_->step();
  if (ema_) ema_->update();
  device_synchronize(c_.device);   // accelerators queue work: the step ends when it has run
  record_step(out, loss, seconds_since(t0));
  if (!std::isfinite(loss) && c_.stop_on_nan) {
    stop_ = true;
    return;
  }
  if (!c_.save_dir.empty() && c_.save_every > 0 && step_ % c_.save_every == 0 && step_ < total_steps_) checkpoint();
}

// The skip policy gives up after this many batches in a row ran out of memory: when none
// fits, skipping would consume the data forever without a step.
constexpr int64_t kMaxConsecutiveSkips = 10;

void TrainingRun::record_skip(const StepOutput& out, double seconds) {
  train_seconds_ += seconds;
  if (++consecutive_skips_ >= kMaxConsecutiveSkips)
    throw OutOfMemoryError(str_cat("step ", step_ + 1, ": ", consecutive_skips_, " batches in a row ran out of memory ",
                                   "and were skipped (the last: ", out.skip_reason, "); no batch fits, so skipping ",
                                   "cannot make progress: use a smaller batch or the split policy"));
  history_["skipped"].push_back(
      {{"after_step", step_}, {"phase", out.skip_phase}, {"samples", batch_.n}, {"reason", out.skip_reason}});
  if (!quiet_)
    std::printf("step %lld skipped (%lld samples lost): %s\n", (long long)step_ + 1, (long long)batch_.n,
                out.skip_reason.c_str());
}

// A finished optimizer step: times, the epoch's sums (a non-finite loss is recorded as null
// and left out of them), the history and the log line.
void TrainingRun::record_step(const StepOutput& out, double loss, double seconds) {
  step_times_.push_back(seconds);
  train_seconds_ += seconds;
  ++step_;
  consecutive_skips_ = 0;
  const bool has_value = std::isfinite(loss) && !c_.device.is_meta();
  if (has_value) {
    epoch_loss_ += loss * double(batch_.n);
    epoch_samples_ += batch_.n;
    if (out.correct_counted) {
      epoch_correct_ += out.correct;
      epoch_scored_ += out.scored;
    }
  }
  history_["train_loss"].push_back(has_value ? json(loss) : json());
  history_["lr"].push_back(opt_->param_groups()[0].lr);
  if (opt_->param_groups().size() > 1) {
    json lrs = json::array();
    for (const ParamGroup& g : opt_->param_groups()) lrs.push_back(g.lr);
    history_["lr_groups"].push_back(lrs);
  }
  if (scaler_) {
    history_["loss_scale"].push_back(scaler_->last_step_scale());
    if (scaler_->found_inf()) history_["found_inf_steps"].push_back(step_);
  }
  if (!quiet_ && c_.log_every > 0 && step_ % c_.log_every == 0)
    std::printf("step %lld/%lld loss %.4f lr %.5f %.1f ms/step\n", (long long)step_, (long long)total_steps_, loss,
                opt_->param_groups()[0].lr, 1e3 * seconds);
}

void TrainingRun::checkpoint() {
  CheckpointData d;
  d.model = parameters_and_buffers(*model_);
  d.trainer = opt_->state_tensors();
  json optimizer = opt_->state_json();
  if (zero()) {   // DDP's format, gathered on every rank (stage 3: the parameters too)
    DistributedDataParallel::ZeroState z = c_.ddp->zero_consolidate(d.trainer, optimizer);
    for (auto& [name, t] : d.model)
      for (const auto& [pname, p] : z.params)
        if (pname == name) t = p;
    d.trainer = std::move(z.optimizer_tensors);
    for (auto& t : z.masters) d.trainer.push_back(t);
    optimizer = std::move(z.optimizer);
  }
  if (ema_) for (auto& t : ema_->state_tensors()) d.trainer.push_back(t);
  if (masters_) for (auto& t : masters_->state_tensors()) d.trainer.push_back(t);
  const LoaderState ls = loader_->state();
  const Generator rng = device_generator(c_.device).get_state();
  d.state = {
      {"step", step_},
      {"run_id", run_id_},
      {"config", run_cfg_},
      {"optimizer", optimizer},
      {"scheduler", sched_->state_json()},
      {"loader", {{"epoch", ls.epoch}, {"cursor", ls.cursor}}},
      {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
      {"history", history_},
      {"epoch_sums",
       {{"loss", epoch_loss_}, {"correct", epoch_correct_}, {"samples", epoch_samples_}, {"scored", epoch_scored_}}}};
  if (ema_) d.state["ema"] = ema_->state_json();   // decay, num_updates, names
  if (scaler_) d.state["grad_scaler"] = scaler_->state_json();
  if (!divergence_.is_null()) d.state["divergence"] = divergence_;
  if (rank_ == 0) {   // DDP: rank 0 writes, everyone waits for the file to exist
    const std::string where = save_checkpoint(c_.save_dir, step_, d, &written_checkpoints_, 2, resumed_from_);
    if (!quiet_) std::printf("saved checkpoint %s\n", where.c_str());
  }
  if (c_.ddp) c_.ddp->queue().run([](Communicator& comm) { comm.barrier(); });
}

// Before training: every step-N folder this run will publish (every save_every-th step
// after the start, and the last) is free or the checkpoint it resumed from, so that a
// folder it did not write fails the run now, not after hours of training.
void TrainingRun::check_checkpoint_slots() const {
  if (c_.save_dir.empty() || rank_ != 0) return;
  const int64_t last = std::max(step_, total_steps_);
  for (int64_t n : existing_checkpoint_steps(c_.save_dir)) {
    const bool periodic = c_.save_every > 0 && n > step_ && n < total_steps_ && n % c_.save_every == 0;
    if (periodic || n == last) check_checkpoint_slot_free(c_.save_dir, n, resumed_from_, run_id_);
  }
}

// Evaluation (with the EMA weights swapped in, under autocast) and the epoch's line in history.
void TrainingRun::end_epoch(int64_t epoch) {
  EvalResult ev, raw;
  if (c_.eval_batches != 0 && !c_.device.is_meta()) {   // meta has no values to score
    AutocastGuard amp(c_.amp);
    auto run_eval = [&] {
      return evaluate(*forward_model_, test_set_, c_.batch, c_.eval_batches, c_.device, half_io_ ? &*half_io_ : nullptr,
                      c_.on_oom, c_.workers, pin_, c_.ddp ? &c_.ddp->queue() : nullptr, c_.tta_flip);
    };
    if (ema_) raw = run_eval();   // the trained weights themselves, beside the EMA's
    if (ema_) ema_->swap_in();
    ev = run_eval();
    if (ema_) ema_->swap_out();
  }
  // No value is null, never 0: no scored sample (the meta device, every loss non-finite) for
  // train_*, no evaluated sample (--eval-batches 0, meta, an empty test split) for test_*.
  const json train_loss = epoch_samples_ ? finite_or_null(epoch_loss_ / double(epoch_samples_)) : json();
  const json train_accuracy = epoch_scored_ ? json(double(epoch_correct_) / double(epoch_scored_)) : json();
  const json test_loss = ev.samples > 0 ? finite_or_null(ev.loss) : json();
  const json test_accuracy = ev.samples > 0 ? json(ev.accuracy) : json();
  json e = {{"epoch", epoch}, {"step", step_}, {"train_loss", train_loss}, {"train_accuracy", train_accuracy},
            {"test_loss", test_loss}, {"test_accuracy", test_accuracy}, {"test_samples", ev.samples}};
  if (ev.mean_iou >= 0) e["test_mean_iou"] = ev.mean_iou;
  if (ev.skipped_samples > 0) e["test_samples_skipped"] = ev.skipped_samples;   // --on-oom skip
  if (ema_ && raw.samples > 0) e["test_accuracy_raw"] = raw.accuracy;            // test_accuracy is the EMA's
  if (ev.padding_samples > 0 &&
      test_set_.target_numel() ==
          1) {  // distributed classification: what a gather keeping the sampler's padding would report
    e["test_padding_samples"] = ev.padding_samples;
    e["test_accuracy_padding_kept"] =
        double(ev.correct + ev.padding_correct) / double(ev.samples + ev.padding_samples);
  }
  history_["epochs"].push_back(e);
  if (!quiet_)
    std::printf("epoch %lld step %lld: train loss %s acc %s | test loss %s acc %s%s\n", (long long)epoch,
                (long long)step_, four_places(train_loss).c_str(), four_places(train_accuracy).c_str(),
                four_places(test_loss).c_str(), four_places(test_accuracy).c_str(),
                ev.mean_iou >= 0 ? str_cat(" mIoU ", ev.mean_iou).c_str() : "");
  epoch_loss_ = 0; epoch_correct_ = 0; epoch_samples_ = 0; epoch_scored_ = 0;
}

}  // namespace oomlab
