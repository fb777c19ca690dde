// trainer.cpp — the training loop (trainer.h): optimizer, schedule, EMA, evaluation (evaluation.h),
// metrics, checkpoints and bit-exact resume around TrainStep.
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
#include "engine/train/checkpoint.h"
#include "engine/train/ddp_strategy.h"
#include "engine/train/evaluation.h"
#include "engine/train/half_mode.h"
#include "engine/train/results.h"
#include "engine/train/train_step.h"
#include "engine/train/trainer_state.h"

namespace oomlab {
using json = nlohmann::json;

namespace {
json finite_or_null(double v) { return std::isfinite(v) ? json(v) : json(); }

NamedTensors state_dict(nn::Module& m) {
  NamedTensors s = m.named_parameters();
  for (auto& b : m.named_buffers()) s.push_back(b);
  return s;
}

}  // namespace

std::string resolve_schedule(const std::string& spec, int64_t total_steps) {
  if (spec == "cosine") return "cosine:t_max=" + std::to_string(total_steps);
  if (spec == "warmup-cosine") {   // a run of one step has no room to warm up
    const int64_t warmup = total_steps >= 2 ? std::max<int64_t>(1, total_steps / 10) : 0;
    return "warmup-cosine:warmup=" + std::to_string(warmup) + ",t_max=" + std::to_string(std::max(total_steps, warmup + 1));
  }
  return spec;
}

json train_model(nn::Module& model_ref, const Dataset& train_set, const Dataset& test_set, const TrainerConfig& c) {
  OOMLAB_CHECK(c.batch >= 1, "--batch must be >= 1 (got ", c.batch, ")");
  OOMLAB_CHECK(c.accumulate >= 1, "--accumulate must be >= 1 (got ", c.accumulate, ")");
  const int64_t step_samples = checked_mul(c.batch, c.accumulate, "--batch x --accumulate");
  OOMLAB_CHECK(c.accumulate == 1 || step_samples <= train_set.size(), "--accumulate ", c.accumulate,
               " is more than the ", train_set.size() / c.batch, " batches of ", c.batch, " in an epoch of the ",
               train_set.name(), " training set (", train_set.size(), " samples): an optimizer step would need ",
               step_samples, " samples");
  OOMLAB_CHECK(c.batch <= train_set.size(), "impossible batch: --batch ", c.batch, " is larger than the ",
               train_set.name(), " training set (", train_set.size(), " samples)");
  OOMLAB_CHECK(!c.master_weights || c.half, "--master-weights needs --half");
  OOMLAB_CHECK(!c.half || !c.amp, "--half and --amp are two ways to train in 16 bits: give one");
  OOMLAB_CHECK(!c.half || c.master_weights || c.loss_scale.kind == LossScaleSpec::Kind::none,
               "--loss-scale ", c.loss_scale.str(), " with --half needs --master-weights: unscaling float16 gradients "
               "in float16 flushes the small ones to zero again (PyTorch's GradScaler refuses them too)");
  const int rank = c.ddp ? c.ddp->queue().rank() : 0, world = c.ddp ? c.ddp->queue().world_size() : 1;
  OOMLAB_CHECK(!c.ddp || c.on_oom == OnOom::raise, "--on-oom ", on_oom_name(c.on_oom),
               " with --parallel ddp is not supported: every rank would have to agree on skipping or splitting");
  const bool quiet = c.quiet || rank != 0;
  if (c.ddp) device_generator(c.device).set_state(Generator{c.seed, 0});   // ranks may be threads: own device only
  else manual_seed(c.seed);
  nn::Module* model = &model_ref;
  nn::Module* forward_model = c.forward_module ? c.forward_module : model;
  const std::vector<Device> devices = c.devices.empty() ? std::vector<Device>{c.device} : c.devices;
  model->train();
  std::optional<HalfIO> half_io;
  std::optional<MasterWeights> masters;
  if (c.half) {
    half_model(*model, DType::f16);
    half_io.emplace(DType::f16, c.master_weights);
    if (c.master_weights) masters.emplace(*model);
  }

  ParamGroup g;
  g.params = masters ? masters->parameters() : model->named_parameters();
  g.lr = c.lr;
  g.momentum = c.optimizer == "sgd" ? c.momentum : 0.0;
  g.weight_decay = c.weight_decay;
  g.nesterov = c.nesterov;
  std::unique_ptr<Optimizer> opt = make_optimizer(c.optimizer, {g});

  // One loader batch per optimizer step: K micro-batches of --batch, in the order of a K*B batch.
  DataLoader loader(train_set, step_samples, /*shuffle=*/c.shuffle, /*drop_last=*/true, c.seed, c.workers);
  if (world > 1) loader.set_shard(rank, world);   // DistributedSampler
  const bool pin = c.pin_memory && has_pinned_host_memory(c.device);
  if (c.pin_memory && !pin)
    std::cerr << "warning: --pin-memory: device " << c.device.str()
              << " has no pinned host memory; batches stay in pageable memory\n";
  if (pin) loader.set_pinner([dev = c.device](size_t n) { return pinned_host_alloc(dev, n); });
  const int64_t total_steps =
      c.steps > 0 ? c.steps : checked_mul(c.epochs, loader.batches_per_epoch(), "--epochs x batches per epoch");
  const std::string sched_spec = resolve_schedule(c.schedule, total_steps);
  LrScheduler sched(*opt, parse_lr_schedule(sched_spec));
  json run_cfg = c.config;
  run_cfg["resolved_schedule"] = sched_spec;
  std::unique_ptr<WeightEma> ema;
  if (c.ema_decay > 0) ema = std::make_unique<WeightEma>(state_dict(*model), c.ema_decay);

  json history = {{"train_loss", json::array()}, {"lr", json::array()}, {"epochs", json::array()},
                  {"skipped", json::array()}, {"oom_splits", json::array()}};
  std::vector<StepStrategy*> strategies = c.strategies;
  std::optional<GradientAccumulation> accumulation;
  if (c.accumulate > 1) strategies.insert(strategies.begin(), &accumulation.emplace(c.accumulate));
  std::optional<DdpStrategy> ddp_strategy;   // right after accumulation: before unscaling / clipping
  if (c.ddp) strategies.insert(strategies.begin() + (c.accumulate > 1 ? 1 : 0), &ddp_strategy.emplace(*c.ddp));
  std::optional<AutocastStrategy> autocast;
  std::optional<GradScaler> scaler;
  if (c.amp) strategies.push_back(&autocast.emplace(*c.amp));
  if (half_io) strategies.push_back(&*half_io);
  if (masters) strategies.push_back(&*masters);   // before the scaler: it unscales the float32 master grads
  if (c.loss_scale.kind != LossScaleSpec::Kind::none) {
    strategies.push_back(&scaler.emplace(c.loss_scale));
    history["loss_scale"] = json::array();
    history["found_inf_steps"] = json::array();
  }
  OomRecovery oom_recovery(c.on_oom);
  strategies.push_back(&oom_recovery);
  TrainStep train_step(*forward_model, *opt, strategies);
  int64_t step = 0;
  json divergence;   // {"step", "loss"} of the first non-finite loss, once there was one
  double epoch_loss = 0;   // running sums of the current epoch (checkpointed)
  int64_t epoch_correct = 0, epoch_samples = 0, epoch_scored = 0;   // scored: samples or pixels
  if (!c.resume_dir.empty()) {
    // The run's config must match the checkpoint's (checked before any weights load, so a
    // different architecture is reported as such, not as missing tensors).
    auto check_config = [&](const json& st, const std::string& file) {
      OOMLAB_CHECK_T(IoError, st.contains("config") && st["config"].is_object(), "--resume: ", file,
                     ": field \"config\" is missing or not an object");
      const json& saved = st["config"];
      for (const std::string& k : c.resume_keys) {
        OOMLAB_CHECK_T(IoError, saved.contains(k), "--resume: ", file, ": field \"config.", k, "\" is missing");
        OOMLAB_CHECK(saved[k] == run_cfg[k], "--resume: checkpoint ", file, " was made with ", k, "=", saved[k].dump(),
                     ", this run has ", run_cfg[k].dump());
      }
    };
    LoadedCheckpoint ck = load_checkpoint(c.resume_dir, state_dict(*model), check_config);
    const TrainerState st = parse_trainer_state(ck.state, ck.path + "/trainer_state.json");
    OOMLAB_CHECK_T(IoError, !ema || st.ema.is_object(), "--resume: ", ck.path,
                   "/trainer_state.json: field \"ema\" is missing (this run has --ema, the checkpoint's had none)");
    NamedTensors opt_tensors, ema_tensors, master_tensors;
    for (auto& [n, t] : ck.trainer)
      (n.rfind("ema.", 0) == 0 ? ema_tensors : n.rfind("master.", 0) == 0 ? master_tensors : opt_tensors).push_back({n, t});
    try {   // the components validate their own parts; say which file they came from
      opt->load_state(st.optimizer, opt_tensors);
      sched.load_state(st.scheduler);
      if (ema) {
        ema->load_state(ema_tensors, st.ema);
        ema->set_decay(c.ema_decay);   // this run's --ema (the update count stays restored)
      }
      loader.restore(st.loader);
      if (masters) masters->load_state(master_tensors);
      if (scaler) {
        OOMLAB_CHECK_T(IoError, ck.state.contains("grad_scaler"), "--resume: ", ck.path,
                       "/trainer_state.json: field \"grad_scaler\" is missing (this run scales the loss)");
        scaler->load_state(ck.state["grad_scaler"]);
      }
    } catch (const ValueError& e) {
      throw ValueError(str_cat("--resume: ", ck.path, ": ", e.what()));
    }
    device_generator(c.device).set_state(st.rng);
    history = st.history;
    divergence = st.divergence;
    step = st.step;
    epoch_loss = st.epoch_loss;
    epoch_correct = st.epoch_correct;
    epoch_samples = st.epoch_samples;
    epoch_scored = checked_mul(epoch_samples, train_set.target_numel(), "--resume: epoch_sums.samples");
    if (!quiet) std::printf("resumed from %s at step %lld\n", ck.path.c_str(), (long long)step);
  }

  std::vector<std::string> written_checkpoints;   // retention removes only these
  auto checkpoint = [&]() {
    CheckpointData d;
    d.model = state_dict(*model);
    d.trainer = opt->state_tensors();
    if (ema) for (auto& t : ema->state_tensors()) d.trainer.push_back(t);
    if (masters) for (auto& t : masters->state_tensors()) d.trainer.push_back(t);
    LoaderState ls = loader.state();
    const Generator rng = device_generator(c.device).get_state();
    d.state = {{"step", step}, {"config", run_cfg}, {"optimizer", opt->state_json()},
               {"scheduler", sched.state_json()}, {"loader", {{"epoch", ls.epoch}, {"cursor", ls.cursor}}},
               {"rng", {{"seed", rng.seed}, {"offset", rng.offset}}},
               {"history", history},
               {"epoch_sums", {{"loss", epoch_loss}, {"correct", epoch_correct}, {"samples", epoch_samples}}}};
    if (ema) d.state["ema"] = ema->state_json();   // decay, num_updates, names
    if (scaler) d.state["grad_scaler"] = scaler->state_json();
    if (!divergence.is_null()) d.state["divergence"] = divergence;
    if (rank == 0) {   // DDP: rank 0 writes, everyone waits for the file to exist
      std::string where = save_checkpoint(c.save_dir, step, d, &written_checkpoints);
      if (!quiet) std::printf("saved checkpoint %s\n", where.c_str());
    }
    if (c.ddp) c.ddp->queue().run([](Communicator& comm) { comm.barrier(); });
  };

  std::vector<double> step_times;
  double train_seconds = 0;   // this process's training steps (not evaluation), skipped ones included
  HostBatch b;
  auto end_epoch = [&](int64_t epoch) {
    EvalResult ev;
    if (c.eval_batches != 0 && !c.device.is_meta()) {   // meta has no values to score
      if (ema) ema->swap_in();
      AutocastGuard amp(c.amp);
      ev = evaluate(*forward_model, test_set, c.batch, c.eval_batches, c.device, half_io ? &*half_io : nullptr,
                    c.on_oom, c.workers, pin, c.ddp ? &c.ddp->queue() : nullptr);
      if (ema) ema->swap_out();
    }
    json e = {{"epoch", epoch}, {"step", step},
              {"train_loss", finite_or_null(epoch_samples ? epoch_loss / double(epoch_samples) : 0.0)},
              {"train_accuracy", epoch_scored ? double(epoch_correct) / double(epoch_scored) : 0.0},
              {"test_loss", finite_or_null(ev.loss)}, {"test_accuracy", ev.accuracy}, {"test_samples", ev.samples}};
    if (ev.mean_iou >= 0) e["test_mean_iou"] = ev.mean_iou;
    if (ev.skipped_samples > 0) e["test_samples_skipped"] = ev.skipped_samples;   // --on-oom skip
    history["epochs"].push_back(e);
    if (!quiet)
      std::printf("epoch %lld step %lld: train loss %.4f acc %.4f | test loss %.4f acc %.4f%s\n", (long long)epoch,
                  (long long)step, e["train_loss"].get<double>(), e["train_accuracy"].get<double>(), ev.loss, ev.accuracy,
                  ev.mean_iou >= 0 ? str_cat(" mIoU ", ev.mean_iou).c_str() : "");
    epoch_loss = 0; epoch_correct = 0; epoch_samples = 0; epoch_scored = 0;
  };

  while (step < total_steps) {
    const int64_t epoch = loader.epoch();
    if (!loader.next(b)) {   // the loader moves itself to the next epoch
      end_epoch(epoch);
      continue;
    }
    auto t0 = std::chrono::steady_clock::now();
    StepOutput out;
    Tensor x, y;
    try {
      x = batch_input_to_device(b, c.device);
      y = batch_target_to_device(b, c.device);
    } catch (const OutOfMemoryError& e) {   // the step handles its own phases; this is the copy
      if (c.on_oom != OnOom::skip) throw OutOfMemoryError(str_cat("copying a batch to the device: ", e.what()));
      x = Tensor();
      out.skipped = true;
      out.skip_reason = str_cat("out of memory in input: ", e.what());
      out.skip_phase = "input";
    }
    if (!out.skipped) {
      try {
        out = train_step.run(x, y, /*track_memory=*/false);
      } catch (const OutOfMemoryError& e) {   // --on-oom raise (or split at its limit): say which batch
        throw OutOfMemoryError(str_cat("step ", step + 1, " (a batch of shape ", shape_str(x.shape()), "): ", e.what()));
      }
    }
    x = Tensor();
    y = Tensor();
    if (out.skipped) {   // an OOM was handled: the batch is consumed, no update happened
      device_synchronize(c.device);
      train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      history["skipped"].push_back(
          {{"after_step", step}, {"phase", out.skip_phase}, {"samples", b.n}, {"reason", out.skip_reason}});
      if (!quiet)
        std::printf("step %lld skipped (%lld samples lost): %s\n", (long long)step + 1, (long long)b.n,
                    out.skip_reason.c_str());
      continue;
    }
    if (out.oom_splits > 0) {
      history["oom_splits"].push_back({{"step", step + 1}, {"micro_batches", out.micro_batches}});
      if (!quiet)
        std::printf("step %lld: out of memory, retried as %lld micro-batches\n", (long long)step + 1,
                    (long long)out.micro_batches);
    }
    const double loss = out.loss.item();
    const bool finite = std::isfinite(loss);
    if (!finite && divergence.is_null()) {
      divergence = {{"step", step + 1}, {"loss", std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf"}};
      std::printf("step %lld: the loss is %s: diverged (%s)\n", (long long)step + 1,
                  divergence["loss"].get<std::string>().c_str(), c.stop_on_nan ? "stopping; --on-nan continue goes on"
                                                                                : "going on: --on-nan continue");
    }
    sched.step();
    if (ema) ema->update();
    device_synchronize(c.device);   // accelerators queue work: the step ends when it has run
    step_times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    train_seconds += step_times.back();
    ++step;
    if (finite) {   // a non-finite loss is recorded as null and left out of the epoch's sums
      epoch_loss += loss * double(b.n);
      epoch_correct += out.correct;
      epoch_samples += b.n;
      epoch_scored += b.n * train_set.target_numel();
    }
    history["train_loss"].push_back(finite_or_null(loss));
    history["lr"].push_back(opt->param_groups()[0].lr);
    if (scaler) {
      history["loss_scale"].push_back(scaler->last_step_scale());
      if (scaler->found_inf()) history["found_inf_steps"].push_back(step);
    }
    if (!quiet && c.log_every > 0 && step % c.log_every == 0)
      std::printf("step %lld/%lld loss %.4f lr %.5f %.1f ms/step\n", (long long)step, (long long)total_steps, loss,
                  opt->param_groups()[0].lr, 1e3 * step_times.back());
    if (!finite && c.stop_on_nan) break;
    if (!c.save_dir.empty() && c.save_every > 0 && step % c.save_every == 0 && step < total_steps) checkpoint();
  }
  const bool stopped = !divergence.is_null() && c.stop_on_nan;
  if (epoch_samples > 0 || history["epochs"].empty()) end_epoch(loader.epoch());
  // A run stopped by divergence keeps its last good checkpoint: its weights are not finite.
  if (!c.save_dir.empty() && !stopped) checkpoint();

  // Steady-state timing: drop the first step (allocator warm-up) when we have more.
  std::vector<double> steady(step_times.size() > 1 ? step_times.begin() + 1 : step_times.begin(), step_times.end());
  json times = summarize_times(steady);
  double med = times["median"].get<double>();
  json metrics = {{"steps", step}, {"history", history}, {"step_time_s", times},
                  {"images_per_s", med > 0 ? double(step_samples) * world / med : 0.0},
                  {"train_seconds", train_seconds},
                  {"pin_memory", pin}};
  {
    int64_t lost = 0;
    for (const json& e : history["skipped"]) lost += e.value("samples", int64_t(0));
    const int64_t seen = checked_mul(step, step_samples, "steps x samples per step") + lost;
    metrics["oom"] = {{"policy", on_oom_name(c.on_oom)}, {"skipped_batches", history["skipped"].size()},
                      {"samples_lost", lost}, {"samples_lost_pct", seen ? 100.0 * double(lost) / double(seen) : 0.0},
                      {"split_batches", history["oom_splits"].size()}};
  }
  if (!history["epochs"].empty()) metrics["final_test_accuracy"] = history["epochs"].back()["test_accuracy"];
  if (!divergence.is_null()) {
    metrics["diverged_at_step"] = divergence["step"];
    metrics["diverged_loss"] = divergence["loss"];
    metrics["stopped_on_nan"] = stopped;
  }
  if (c.ddp) {
    metrics["ddp"] = c.ddp->stats().to_json();
    metrics["ddp"]["world_size"] = world;
    metrics["ddp"]["rank"] = rank;
    metrics["ddp"]["backend"] = c.ddp->queue().comm().backend();
    metrics["ddp"]["global_batch"] = step_samples * world;
    metrics["ddp"]["bucket_bytes"] = c.ddp->bucket_bytes();
    metrics["ddp"]["bytes_sent"] = c.ddp->queue().comm().stats().bytes_sent;
  }
  return make_results("train", devices, run_cfg, metrics);
}

}  // namespace oomlab
