// trainer.cpp — the `oomlab train` loop: data, model, optimizer, schedule, EMA,
// evaluation, metrics, checkpoints and bit-exact resume.
#include "engine/train/trainer.h"

#include <chrono>
#include <cstdio>
#include <memory>

#include "engine/autograd/grad_mode.h"
#include "engine/core/backend.h"
#include "engine/core/dispatch.h"
#include "engine/core/rng.h"
#include "engine/data/dataloader.h"
#include "engine/data/dataset.h"
#include "engine/data/synthetic_seg.h"
#include "engine/data/synthetic_seq.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/memory_export.h"
#include "engine/ops/loss.h"
#include "engine/optim/ema.h"
#include "engine/optim/lr_schedule.h"
#include "engine/optim/optimizer.h"
#include "engine/train/checkpoint.h"
#include "engine/train/results.h"
#include "engine/train/train_step.h"
#include "models/model_zoo.h"

namespace oomlab {
using json = nlohmann::json;

json TrainConfig::to_json() const {
  json j = {{"model", model}, {"dataset", dataset}, {"data_dir", data_dir}, {"input", input},
          {"num_classes", num_classes}, {"synthetic_size", synthetic_size},
          {"seq_len", seq_len}, {"seq_min_len", seq_min_len}, {"long_seq_len", long_seq_len},
          {"long_seq_prob", long_seq_prob}, {"device", device.str()},
          {"batch", batch}, {"epochs", epochs}, {"steps", steps}, {"optimizer", optimizer}, {"lr", lr},
          {"momentum", momentum}, {"weight_decay", weight_decay}, {"nesterov", nesterov},
          {"schedule", schedule}, {"ema_decay", ema_decay}, {"seed", seed}, {"device_memory", device_memory},
          {"save_dir", save_dir}, {"save_every", save_every}, {"resume_dir", resume_dir},
          {"eval_batches", eval_batches}};
  j.update(arch.to_json(model));   // bert-*: hidden ... max_positions, dropout; unet*: base_width, depth
  return j;
}

namespace {
// A contiguous index range of another dataset (synthetic train/test splits).
class RangeDataset final : public Dataset {
 public:
  RangeDataset(std::shared_ptr<Dataset> base, int64_t begin, int64_t size, std::string name)
      : base_(std::move(base)), begin_(begin), size_(size), name_(std::move(name)) {}
  int64_t size() const override { return size_; }
  Shape sample_shape() const override { return base_->sample_shape(); }
  int64_t num_classes() const override { return base_->num_classes(); }
  void get(int64_t i, float* img, int64_t* label) const override { base_->get(begin_ + i, img, label); }
  std::string name() const override { return name_; }
  DType input_dtype() const override { return base_->input_dtype(); }
  Shape target_shape() const override { return base_->target_shape(); }
  void get_tokens(int64_t i, std::vector<int64_t>& tokens, int64_t* label) const override {
    base_->get_tokens(begin_ + i, tokens, label);
  }
 private:
  std::shared_ptr<Dataset> base_;
  int64_t begin_, size_;
  std::string name_;
};

struct Datasets { std::shared_ptr<Dataset> train, test; };

// What each dataset feeds: fashion-mnist/synthetic image classification, synthetic-seq
// token classification, synthetic-seg image segmentation. A model of another kind is a
// usage error named up front (not a shape error deep in the first forward).
void check_model_fits_dataset(const std::string& model, const std::string& dataset) {
  const InputKind in = model_input_kind(model);   // also rejects unknown models
  const TaskKind task = model_task_kind(model);
  const char* want = nullptr;
  if (in == InputKind::tokens) want = "synthetic-seq";
  else if (task == TaskKind::segmentation) want = "synthetic-seg";
  // Unknown dataset names pass here and are reported by make_datasets.
  const bool ok = want ? dataset == want : dataset != "synthetic-seq" && dataset != "synthetic-seg";
  OOMLAB_CHECK(ok, "--model ", model, " cannot train on --dataset ", dataset, ": ", model, " takes ",
               in == InputKind::tokens ? "token ids" : "images", " for ",
               task == TaskKind::segmentation ? "segmentation" : "classification", "; use --dataset ",
               want ? want : "fashion-mnist or synthetic");
}

Datasets make_datasets(const TrainConfig& c) {
  if (c.dataset == "fashion-mnist")
    return {std::make_shared<FashionMnistDataset>(Split::train, c.data_dir),
            std::make_shared<FashionMnistDataset>(Split::test, c.data_dir)};
  int64_t test_size = std::max<int64_t>(c.synthetic_size / 4, c.batch);
  std::shared_ptr<Dataset> all;
  if (c.dataset == "synthetic-seq") {
    SyntheticSeqOptions o;
    o.size = c.synthetic_size + test_size;
    o.max_len = c.seq_len;
    o.min_len = c.seq_min_len;
    o.long_prob = c.long_seq_prob;
    o.long_len = c.long_seq_len;
    o.seed = c.seed + 1;
    all = std::make_shared<SyntheticSequenceDataset>(o);
  } else {
    OOMLAB_CHECK(c.dataset == "synthetic" || c.dataset == "synthetic-seg", "unknown dataset '", c.dataset,
                 "' (fashion-mnist, synthetic, synthetic-seq, synthetic-seg)");
    ModelConfig mc = default_model_config(c.model);
    Shape in = c.input.empty() ? Shape{mc.in_channels, mc.height, mc.width} : c.input;
    OOMLAB_CHECK_T(ShapeError, in.size() == 3, "--input must be C,H,W (got ", shape_str(in), ")");
    if (c.dataset == "synthetic")
      all = std::make_shared<SyntheticImageDataset>(in, c.synthetic_size + test_size, c.num_classes, c.seed + 1);
    else
      all = std::make_shared<SyntheticSegmentationDataset>(in, c.synthetic_size + test_size, c.num_classes, c.seed + 1);
  }
  return {std::make_shared<RangeDataset>(all, 0, c.synthetic_size, all->name() + "[train]"),
          std::make_shared<RangeDataset>(all, c.synthetic_size, test_size, all->name() + "[test]")};
}

// accuracy: samples (classification) or pixels (segmentation) whose argmax is right;
// mean_iou: segmentation only (-1 otherwise), over classes present in target or prediction.
struct EvalResult { double loss = 0, accuracy = 0, mean_iou = -1; int64_t samples = 0; };

EvalResult evaluate(nn::Module& model, const Dataset& test, int64_t batch, int64_t max_batches, Device dev) {
  NoGradGuard ng;
  model.eval();
  DataLoader loader(test, batch, /*shuffle=*/false, /*drop_last=*/false, 0);
  HostBatch b;
  EvalResult r;
  double loss_sum = 0;
  int64_t correct = 0, nb = 0, scored = 0;
  const bool seg = !test.target_shape().empty();
  const int64_t K = test.num_classes(), per_sample = test.target_numel();
  std::vector<int64_t> confusion(size_t(seg ? K * K : 0), 0);
  while ((max_batches < 0 || nb < max_batches) && loader.next(b)) {
    Tensor x = batch_input_to_device(b, dev);
    Tensor y = batch_target_to_device(b, dev);
    Tensor logits = model(x);
    loss_sum += task_loss(logits, y).item() * double(b.n);
    correct += count_task_correct(logits, y, seg ? &confusion : nullptr);
    r.samples += b.n;
    scored += b.n * per_sample;
    ++nb;
  }
  model.train();
  if (r.samples) { r.loss = loss_sum / double(r.samples); r.accuracy = double(correct) / double(scored); }
  if (seg) r.mean_iou = mean_iou(confusion, K);
  return r;
}

NamedTensors state_dict(nn::Module& m) {
  NamedTensors s = m.named_parameters();
  for (auto& b : m.named_buffers()) s.push_back(b);
  return s;
}

// Validated reads of trainer_state.json: a missing or mistyped field is an IoError naming
// the file and the field's dotted path (never nlohmann's type_error).
enum class Want { object, array, count, u64, number };
const json& state_field(const json& root, const std::string& file, std::initializer_list<const char*> path, Want want) {
  const json* j = &root;
  std::string name;
  for (const char* k : path) {
    if (!name.empty()) name += '.';
    name += k;
    OOMLAB_CHECK_T(IoError, j->is_object() && j->contains(k), "--resume: ", file, ": field \"", name, "\" is missing");
    j = &(*j)[k];
  }
  bool ok = false;
  const char* what = "";
  switch (want) {
    case Want::object: ok = j->is_object(); what = "an object"; break;
    case Want::array: ok = j->is_array(); what = "an array"; break;
    case Want::count:   // non-negative, fits int64
      ok = j->is_number_unsigned() && j->get<uint64_t>() <= uint64_t(INT64_MAX);
      what = "a non-negative integer"; break;
    case Want::u64: ok = j->is_number_unsigned(); what = "a non-negative integer"; break;
    case Want::number: ok = j->is_number(); what = "a number"; break;
  }
  std::string got = j->dump();
  if (got.size() > 40) got = got.substr(0, 40) + "...";
  OOMLAB_CHECK_T(IoError, ok, "--resume: ", file, ": field \"", name, "\" must be ", what, " (got ", got, ")");
  return *j;
}
}  // namespace

json train(const TrainConfig& c) {
  manual_seed(c.seed);
  reset_allocators();
  // allocator_for(cuda) needs the backend's raw-memory factory, registered with its kernels.
  ensure_kernels_registered();
  allocator_for(c.device).set_capacity(c.device_memory);
  if (c.record_history) {
    allocator_for(c.device).record_history(true);
    OpProfiler::enable(true);
  }
  check_model_fits_dataset(c.model, c.dataset);
  c.arch.check_fits(c.model);
  if (model_input_kind(c.model) == InputKind::tokens) {   // the position table is never enlarged silently
    check_seq_fits(c.model, c.arch, c.seq_len, "--seq-len");
    if (c.long_seq_prob > 0) check_seq_fits(c.model, c.arch, c.long_seq_len, "--long-seq-len");
  }
  Datasets data = make_datasets(c);
  OOMLAB_CHECK(c.batch <= data.train->size(), "impossible batch: --batch ", c.batch, " is larger than the ",
               data.train->name(), " training set (", data.train->size(), " samples)");

  Shape in = data.train->sample_shape();
  ModelConfig mc;
  mc.num_classes = data.train->num_classes();
  c.arch.apply(mc);
  if (data.train->is_tokens()) {
    mc.seq_len = c.seq_len;
  } else {
    mc.in_channels = in[0]; mc.height = in[1]; mc.width = in[2];
  }
  mc.device = c.device;
  mc.seed = c.seed;
  nn::ModulePtr model = build_model(c.model, mc);
  model->train();

  ParamGroup g;
  g.params = model->named_parameters();
  g.lr = c.lr;
  g.momentum = c.optimizer == "sgd" ? c.momentum : 0.0;
  g.weight_decay = c.weight_decay;
  g.nesterov = c.nesterov;
  std::unique_ptr<Optimizer> opt = make_optimizer(c.optimizer, {g});

  DataLoader loader(*data.train, c.batch, /*shuffle=*/true, /*drop_last=*/true, c.seed);
  const int64_t total_steps = c.steps > 0 ? c.steps : c.epochs * loader.batches_per_epoch();
  std::string sched_spec = c.schedule;
  if (sched_spec == "cosine") sched_spec = "cosine:t_max=" + std::to_string(total_steps);
  LrScheduler sched(*opt, parse_lr_schedule(sched_spec));
  std::unique_ptr<WeightEma> ema;
  if (c.ema_decay > 0) ema = std::make_unique<WeightEma>(state_dict(*model), c.ema_decay);

  json history = {{"train_loss", json::array()}, {"lr", json::array()}, {"epochs", json::array()}};
  int64_t step = 0;
  double epoch_loss = 0;   // running sums of the current epoch (checkpointed)
  int64_t epoch_correct = 0, epoch_samples = 0, epoch_scored = 0;   // scored: samples or pixels
  if (!c.resume_dir.empty()) {
    // The run's config must match the checkpoint's (checked before any weights load, so a
    // different architecture is reported as such, not as missing tensors).
    const json run_cfg = c.to_json();
    auto check_config = [&](const json& st, const std::string& file) {
      const json& saved = state_field(st, file, {"config"}, Want::object);
      std::vector<std::string> keys = {"model", "dataset", "batch", "optimizer", "seed"};
      const json arch = c.arch.to_json(c.model);
      for (auto it = arch.begin(); it != arch.end(); ++it) keys.push_back(it.key());
      for (const std::string& k : keys) {
        OOMLAB_CHECK_T(IoError, saved.contains(k), "--resume: ", file, ": field \"config.", k, "\" is missing");
        OOMLAB_CHECK(saved[k] == run_cfg[k], "--resume: checkpoint ", file, " was made with ", k, "=", saved[k].dump(),
                     ", this run has ", run_cfg[k].dump());
      }
    };
    LoadedCheckpoint ck = load_checkpoint(c.resume_dir, state_dict(*model), check_config);
    const json& st = ck.state;
    const std::string file = ck.path + "/trainer_state.json";
    auto field = [&](std::initializer_list<const char*> path, Want want) -> const json& {
      return state_field(st, file, path, want);
    };
    const int64_t saved_step = field({"step"}, Want::count).get<int64_t>();
    const json& saved_history = field({"history"}, Want::object);
    for (const char* k : {"train_loss", "lr"})
      OOMLAB_CHECK_T(IoError, int64_t(field({"history", k}, Want::array).size()) == saved_step, "--resume: ", file,
                     ": field \"history.", k, "\" has ", field({"history", k}, Want::array).size(),
                     " entries for step ", saved_step);
    field({"history", "epochs"}, Want::array);
    const uint64_t rng_seed = field({"rng", "seed"}, Want::u64).get<uint64_t>();
    const uint64_t rng_offset = field({"rng", "offset"}, Want::u64).get<uint64_t>();
    const LoaderState ls{field({"loader", "epoch"}, Want::count).get<int64_t>(),
                         field({"loader", "cursor"}, Want::count).get<int64_t>()};
    const double sum_loss = field({"epoch_sums", "loss"}, Want::number).get<double>();
    const int64_t sum_correct = field({"epoch_sums", "correct"}, Want::count).get<int64_t>();
    const int64_t sum_samples = field({"epoch_sums", "samples"}, Want::count).get<int64_t>();
    const json& opt_state = field({"optimizer"}, Want::object);
    const json& sched_state = field({"scheduler"}, Want::object);
    // The EMA's decay and update count ("ema"; absent when the run had no EMA).
    const json ema_state = ema ? field({"ema"}, Want::object) : json();
    NamedTensors opt_tensors, ema_tensors;
    for (auto& [n, t] : ck.trainer) (n.rfind("ema.", 0) == 0 ? ema_tensors : opt_tensors).push_back({n, t});
    try {   // the components validate their own parts; say which file they came from
      opt->load_state(opt_state, opt_tensors);
      sched.load_state(sched_state);
      if (ema) {
        ema->load_state(ema_tensors, ema_state);
        ema->set_decay(c.ema_decay);   // this run's --ema (the update count stays restored)
      }
      loader.restore(ls);
    } catch (const ValueError& e) {
      throw ValueError(str_cat("--resume: ", ck.path, ": ", e.what()));
    }
    default_generator() = Generator{rng_seed, rng_offset};
    history = saved_history;
    step = saved_step;
    epoch_loss = sum_loss;
    epoch_correct = sum_correct;
    epoch_samples = sum_samples;
    epoch_scored = epoch_samples * data.train->target_numel();
    if (!c.quiet) std::printf("resumed from %s at step %lld\n", ck.path.c_str(), (long long)step);
  }

  auto checkpoint = [&]() {
    CheckpointData d;
    d.model = state_dict(*model);
    d.trainer = opt->state_tensors();
    if (ema) for (auto& t : ema->state_tensors()) d.trainer.push_back(t);
    LoaderState ls = loader.state();
    d.state = {{"step", step}, {"config", c.to_json()}, {"optimizer", opt->state_json()},
               {"scheduler", sched.state_json()}, {"loader", {{"epoch", ls.epoch}, {"cursor", ls.cursor}}},
               {"rng", {{"seed", default_generator().seed}, {"offset", default_generator().offset}}},
               {"history", history},
               {"epoch_sums", {{"loss", epoch_loss}, {"correct", epoch_correct}, {"samples", epoch_samples}}}};
    if (ema) d.state["ema"] = ema->state_json();   // decay, num_updates, names
    std::string where = save_checkpoint(c.save_dir, step, d);
    if (!c.quiet) std::printf("saved checkpoint %s\n", where.c_str());
  };

  std::vector<double> step_times;
  HostBatch b;
  auto end_epoch = [&](int64_t epoch) {
    EvalResult ev;
    if (c.eval_batches != 0 && !c.device.is_meta()) {   // meta has no values to score
      if (ema) ema->swap_in();
      ev = evaluate(*model, *data.test, c.batch, c.eval_batches, c.device);
      if (ema) ema->swap_out();
    }
    json e = {{"epoch", epoch}, {"step", step},
              {"train_loss", epoch_samples ? epoch_loss / double(epoch_samples) : 0.0},
              {"train_accuracy", epoch_scored ? double(epoch_correct) / double(epoch_scored) : 0.0},
              {"test_loss", ev.loss}, {"test_accuracy", ev.accuracy}, {"test_samples", ev.samples}};
    if (ev.mean_iou >= 0) e["test_mean_iou"] = ev.mean_iou;
    history["epochs"].push_back(e);
    if (!c.quiet)
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
    Tensor x = batch_input_to_device(b, c.device);
    Tensor y = batch_target_to_device(b, c.device);
    StepOutput out = train_step(*model, *opt, x, y, /*track_memory=*/false);
    double loss = out.loss.item();
    sched.step();
    if (ema) ema->update();
    device_synchronize(c.device);   // accelerators queue work: the step ends when it has run
    step_times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    ++step;
    epoch_loss += loss * double(b.n);
    epoch_correct += out.correct;
    epoch_samples += b.n;
    epoch_scored += b.n * data.train->target_numel();
    history["train_loss"].push_back(loss);
    history["lr"].push_back(opt->param_groups()[0].lr);
    if (!c.quiet && c.log_every > 0 && step % c.log_every == 0)
      std::printf("step %lld/%lld loss %.4f lr %.5f %.1f ms/step\n", (long long)step, (long long)total_steps, loss,
                  opt->param_groups()[0].lr, 1e3 * step_times.back());
    if (!c.save_dir.empty() && c.save_every > 0 && step % c.save_every == 0 && step < total_steps) checkpoint();
  }
  if (epoch_samples > 0 || history["epochs"].empty()) end_epoch(loader.epoch());
  if (!c.save_dir.empty()) checkpoint();

  if (c.record_history) OpProfiler::enable(false);
  // Steady-state timing: drop the first step (allocator warm-up) when we have more.
  std::vector<double> steady(step_times.size() > 1 ? step_times.begin() + 1 : step_times.begin(), step_times.end());
  json times = summarize_times(steady);
  double med = times["median"].get<double>();
  json metrics = {{"steps", step}, {"history", history}, {"step_time_s", times},
                  {"images_per_s", med > 0 ? double(c.batch) / med : 0.0}};
  if (!history["epochs"].empty()) metrics["final_test_accuracy"] = history["epochs"].back()["test_accuracy"];
  return make_results("train", c.device, c.to_json(), metrics);
}

}  // namespace oomlab
