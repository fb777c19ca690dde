// train_command.cpp — `oomlab train` as a library call (train_command.h): datasets and
// model by name, the family recipe, device set-up, then the engine's train_model().
#include "experiments/train/train_command.h"

#include "engine/nn/checkpoint_plan.h"
#include "experiments/plan/memory_report.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <sstream>

#include "engine/core/byte_sizes.h"
#include "engine/core/checked_math.h"
#include "engine/core/dispatch.h"
#include "engine/data/idx_reader.h"
#include "engine/io/atomic_file.h"
#include "engine/optim/lr_schedule.h"
#include "engine/data/dataset.h"
#include "engine/data/npy_dataset.h"
#include "engine/io/safetensors.h"
#include "engine/data/synthetic_seg.h"
#include "engine/data/synthetic_seq.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/memory_export.h"
#include "engine/train/oom_recovery.h"
#include "engine/train/trainer.h"
#include "experiments/train/parallel_train.h"
#include "experiments/train/recipes.h"
#include "models/model_zoo.h"
#include "models/graph_model.h"

namespace oomlab {
using json = nlohmann::json;

namespace {

struct Datasets { std::shared_ptr<Dataset> train, test; };


// --dataset npy: the files decide the kind (token ids or images; class labels or masks).
void check_model_fits_npy(const std::string& model, const Dataset& d) {
  const bool tokens = model_input_kind(model) == InputKind::tokens;
  const bool seg = model_task_kind(model) == TaskKind::segmentation;
  const bool masks = !d.target_shape().empty();
  OOMLAB_CHECK(tokens == d.is_tokens() && seg == masks, "--model ", model, " cannot train on ", d.name(), ": ", model,
               " takes ", tokens ? "token ids" : "images", " for ", seg ? "segmentation" : "classification",
               ", the files hold ", d.is_tokens() ? "token ids" : "images", " with ",
               masks ? "per-pixel masks" : "class labels");
  if (tokens) d.check_token_ids(bert_shape(model, default_model_config(model)).vocab_size);
}

// The per-sample image shape of an image dataset: Fashion-MNIST's 1x28x28, else --input or
// the model's default.
Shape image_input_shape(const RunSpec& c) {
  if (c.dataset == "fashion-mnist") return {1, 28, 28};
  const ModelConfig mc = default_model_config(c.model);
  return c.input.empty() ? Shape{mc.in_channels, mc.height, mc.width} : c.input;
}

Datasets make_datasets(const RunSpec& c) {
  if (c.dataset == "npy") {
    // --classes, else the largest label of both splits + 1: train and test agree on the head.
    const bool has_test = npy_split_exists(c.data_dir, "test");
    int64_t classes = c.num_classes;
    if (classes == 0)
      classes = std::max<int64_t>({int64_t(1), npy_label_count(c.data_dir, "train"),
                                   has_test ? npy_label_count(c.data_dir, "test") : 0});
    Datasets d;
    d.train = load_npy_dataset(c.data_dir, "train", classes);
    d.test = has_test ? load_npy_dataset(c.data_dir, "test", classes) : d.train;   // no test split: evaluate on train
    check_model_fits_npy(c.model, *d.train);
    if (has_test) check_model_fits_npy(c.model, *d.test);
    OOMLAB_CHECK_T(ShapeError, d.test->sample_shape() == d.train->sample_shape() || d.train->is_tokens(),
                   d.test->name(), " holds ", shape_str(d.test->sample_shape()), " samples, ", d.train->name(), " ",
                   shape_str(d.train->sample_shape()));
    OOMLAB_CHECK(d.test->is_tokens() == d.train->is_tokens() && d.test->target_shape() == d.train->target_shape(),
                 d.test->name(), " and ", d.train->name(), " hold different kinds of inputs or targets");
    return d;
  }
  if (c.dataset == "fashion-mnist")
    return {std::make_shared<FashionMnistDataset>(Split::train, c.data_dir),
            std::make_shared<FashionMnistDataset>(Split::test, c.data_dir)};
  const int64_t test_size = std::max<int64_t>(c.synthetic_size / 4, c.batch);
  const int64_t pool = checked_add(c.synthetic_size, test_size, "--synthetic-size plus its test split");
  std::shared_ptr<Dataset> all;
  if (c.dataset == "synthetic-seq") {
    SyntheticSeqOptions o;
    o.size = pool;
    o.max_len = c.seq_len;
    // a graph's shapes are the export's: padding only where it takes an attention mask
    o.min_len = is_graph_model(c.model) && !graph_has_mask_input(graph_of_model(c.model)) ? c.seq_len : c.seq_min_len;
    o.long_prob = c.long_seq_prob;
    o.long_len = c.long_seq_len;
    o.vocab_size = bert_shape(c.model, default_model_config(c.model)).vocab_size;   // ids the model's table holds
    o.seed = c.seed + 1;
    all = std::make_shared<SyntheticSequenceDataset>(o);
  } else {
    OOMLAB_CHECK(c.dataset == "synthetic" || c.dataset == "synthetic-seg", "unknown dataset '", c.dataset,
                 "' (fashion-mnist, synthetic, synthetic-seq, synthetic-seg)");
    Shape in = image_input_shape(c);
    OOMLAB_CHECK_T(ShapeError, in.size() == 3, "--input must be C,H,W (got ", shape_str(in), ")");
    if (c.dataset == "synthetic")
      all = std::make_shared<SyntheticImageDataset>(in, pool, c.num_classes, c.seed + 1);
    else
      all = std::make_shared<SyntheticSegmentationDataset>(in, pool, c.num_classes, c.seed + 1);
  }
  return {std::make_shared<SubsetDataset>(all, 0, c.synthetic_size, all->name() + "[train]"),
          std::make_shared<SubsetDataset>(all, c.synthetic_size, test_size, all->name() + "[test]")};
}


void print_init_report(const std::string& file, const LoadReport& r) {
  std::printf("--init %s: loaded%s\n", file.c_str(), r.missing.empty() && r.unexpected.empty() ? " every tensor" : "");
  for (const auto& k : r.missing)
    std::printf("  --init-non-strict: kept the model's own %s (not in the file)\n", k.c_str());
  for (const auto& k : r.unexpected) std::printf("  --init-non-strict: skipped %s (not in the model)\n", k.c_str());
}

json config_json(const RunSpec& c, const Recipe& r, const std::vector<std::string>& given) {
  json j = {{"model", c.model},
            {"dataset", c.dataset},
            {"data_dir", c.data_dir},
            {"input", c.input},
            {"num_classes", c.num_classes},
            {"synthetic_size", c.synthetic_size},
            {"seq_len", c.seq_len},
            {"seq_min_len", c.seq_min_len},
            {"long_seq_len", c.long_seq_len},
            {"long_seq_prob", c.long_seq_prob},
            {"device", c.device.str()},
            {"batch", c.batch},
            {"epochs", c.epochs},
            {"steps", c.steps},
            {"optimizer", r.optimizer},
            {"lr", r.lr},
            {"momentum", r.momentum},
            {"weight_decay", r.weight_decay},
            {"nesterov", c.nesterov},
            {"schedule", r.schedule},
            {"ema_decay", c.ema_decay},
            {"lr_groups", lr_groups_text(c.lr_groups)},
            {"tta", c.tta_flip ? "flip" : "none"},
            {"seed", c.seed},
            {"device_memory", c.device_memory},
            {"shuffle", c.shuffle},
            {"init", c.init},
            {"save_dir", c.save_dir},
            {"save_every", c.save_every},
            {"resume_dir", c.resume_dir},
            {"eval_batches", c.eval_batches},
            {"on_nan", c.stop_on_nan ? "stop" : "continue"},
            {"checkpoint", c.checkpoint.spec},
            {"accumulate", c.accumulate},
            {"amp", c.amp_text()},
            {"half", c.half},
            {"master_weights", c.master_weights},
            {"loss_scale", c.loss_scale.str()},
            {"on_oom", on_oom_name(c.on_oom)},
            {"workers", c.workers},
            {"pin_memory", c.pin_memory},
            {"cuda_graphs", c.cuda_graphs},
            {"channels_last", c.channels_last},
            {"recipe", {{"family", r.family}, {"defaults", default_recipe(c.model).to_json()}, {"flags", given}}}};
  j.update(c.arch.to_json(c.model));   // bert-*: hidden ... max_positions, dropout; unet*: base_width, depth
  return j;
}

}  // namespace


namespace {
// This run's step as the meta probes see it (pre-flight, budget planning).
RunSpec probe_spec(const RunSpec& c, const Datasets& data, int64_t seq_len) {
  RunSpec ms = RunSpec::for_model(c.model);
  ms.num_classes = data.train->num_classes();
  ms.arch = c.arch;
  ms.amp = c.amp;
  ms.loss_scale = c.loss_scale;
  ms.half = c.half;
  ms.master_weights = c.master_weights;
  if (model_input_kind(c.model) == InputKind::tokens) {
    ms.seq_len = c.long_seq_prob > 0 ? std::max(seq_len, c.long_seq_len) : seq_len;   // the longest batch
  } else {
    ms.input = data.train->sample_shape();
  }
  return ms;
}

// --checkpoint budget:SIZE -> a concrete policy, from exact meta peaks of this run's step
// (its choice goes into `budget`); any other policy is returned as given.
CheckpointPolicy resolve_checkpoint(const RunSpec& c, const RunSpec& ms, const Recipe& recipe, json& budget) {
  if (c.checkpoint.kind != CheckpointPolicy::Kind::budget) return c.checkpoint;
  const CheckpointBudgetChoice ch = choose_checkpoint_budget(ms, c.batch, recipe.optimizer, c.checkpoint.budget_bytes);
  budget = ch.to_json();
  if (!c.quiet)
    std::printf("--checkpoint %s: %s (exact meta peak of a step: %s)\n", c.checkpoint.spec.c_str(),
                ch.policy.spec.c_str(), format_bytes(double(ch.predicted_peak_bytes)).c_str());
  return ch.policy;
}

// --on-oom split halves a batch down to one sample at worst: on a capped device one sample
// of the longest batch must fit, or the run could only fail later.
void check_split_can_fit(const RunSpec& c, RunSpec one, const Recipe& recipe, const CheckpointPolicy& checkpoint) {
  if (c.on_oom != OnOom::split || c.device_memory == 0) return;
  one.checkpoint = checkpoint;
  const MemoryEstimate e = estimate_memory(one, 1, recipe.optimizer);
  OOMLAB_CHECK(uint64_t(e.peak_allocated_bytes) <= c.device_memory, "--on-oom split cannot make this run fit: one ",
               model_input_kind(c.model) == InputKind::tokens ? str_cat("sequence of ", one.seq_len, " tokens")
                                                               : std::string("sample"),
               " already needs ", format_bytes(double(e.peak_allocated_bytes)),
               " at the peak of a training step (exact meta probe), more than --device-memory ",
               format_bytes(double(c.device_memory)));
}

// Fresh allocators on every logical device of the run, capped at --device-memory, recording
// their history when asked.
void prepare_devices(const RunSpec& c) {
  reset_allocators();
  // allocator_for(cuda) needs the backend's raw-memory factory, registered with its kernels.
  ensure_kernels_registered();
  for (const Device& d : parallel_devices(c)) {
    allocator_for(d).set_capacity(c.device_memory);
    if (c.record_history) allocator_for(d).record_history(true);
  }
  if (c.record_history) OpProfiler::enable(true);
}

ModelConfig run_model_config(const RunSpec& c, const Datasets& data, int64_t seq_len) {
  const Shape in = data.train->sample_shape();
  ModelConfig mc;
  mc.num_classes = data.train->num_classes();
  c.arch.apply(mc);
  if (data.train->is_tokens()) {
    mc.seq_len = seq_len;
  } else {
    mc.in_channels = in[0]; mc.height = in[1]; mc.width = in[2];
  }
  mc.seed = c.seed;
  return mc;
}

// What a checkpoint must have been made with to resume it: the model, its data and the
// recipe (a different --lr would change the run while the results record the new one).
// global_batch, not batch: a DDP run resumes on another world size at the same global batch.
std::vector<std::string> resume_keys(const RunSpec& c) {
  std::vector<std::string> keys = {"model", "dataset", "input", "num_classes", "synthetic_size", "seq_len",
                                   "seq_min_len", "long_seq_len", "long_seq_prob", "shuffle", "global_batch",
                                   "optimizer", "lr", "momentum", "weight_decay", "nesterov", "schedule", "seed",
                                   "accumulate", "amp", "half", "master_weights", "loss_scale"};
  const json arch = c.arch.to_json(c.model);
  for (auto it = arch.begin(); it != arch.end(); ++it) keys.push_back(it.key());
  return keys;
}

TrainerConfig trainer_config(const RunSpec& c, const Recipe& recipe, const json& config) {
  TrainerConfig t;
  t.device = c.device;
  t.batch = c.batch;
  t.epochs = c.epochs;
  t.steps = c.steps;
  t.optimizer = recipe.optimizer;
  t.lr = recipe.lr;
  t.momentum = recipe.momentum;
  t.weight_decay = recipe.weight_decay;
  t.nesterov = c.nesterov;
  t.schedule = recipe.schedule;
  t.ema_decay = c.ema_decay;
  t.lr_groups = c.lr_groups;
  t.tta_flip = c.tta_flip;
  t.seed = c.seed;
  t.save_dir = c.save_dir;
  t.resume_dir = c.resume_dir;
  t.save_every = c.save_every;
  t.eval_batches = c.eval_batches;
  t.log_every = c.log_every;
  t.quiet = c.quiet;
  t.stop_on_nan = c.stop_on_nan;
  t.amp = c.amp;
  t.loss_scale = c.loss_scale;
  t.half = c.half;
  t.accumulate = c.accumulate;
  t.master_weights = c.master_weights;
  t.on_oom = c.on_oom;
  t.workers = c.workers;
  t.pin_memory = c.pin_memory;
  t.cuda_graphs = c.cuda_graphs;
  t.channels_last = c.channels_last;
  t.shuffle = c.shuffle;
  t.config = config;
  t.resume_keys = resume_keys(c);
  return t;
}
}  // namespace

json train(const RunSpec& c) {
  check_train_config(c);
  std::vector<std::string> given;
  const Recipe recipe = resolve_recipe(c.model, {c.optimizer, c.schedule, c.lr, c.momentum, c.weight_decay}, &given);
  // Host-side data first: --dataset npy decides the input shape, classes and length.
  Datasets data = make_datasets(c);
  if (c.dataset == "npy") check_batch_fits(c.batch, c.accumulate, data.train->name(), data.train->size());
  const bool tokens = data.train->is_tokens();
  const int64_t seq_len = c.dataset == "npy" && tokens ? data.train->sample_shape()[0] : c.seq_len;
  if (c.dataset == "npy" && tokens) {
    check_seq_fits(c.model, c.arch, seq_len, "the token files' length");
    const int64_t exported = is_graph_model(c.model) ? graph_token_shape(c.model).seq_len : seq_len;
    OOMLAB_CHECK_T(ShapeError, seq_len == exported, c.model, " was exported for ", exported, "-token sequences and ",
                   data.train->name(), " holds ", seq_len,
                   "-token ones: save them at that length, or export the model ", "again with --input-shape N,",
                   seq_len);
  }
  const RunSpec ms = probe_spec(c, data, seq_len);
  // --half: every op of the step must have a float16 kernel where the run goes.
  // (A build without the device's backend is refused where the device is opened.)
  const DeviceType target = c.device.is_meta() ? DeviceType::cpu : c.device.type;
  if (c.half && backend_linked(device_type_name(target))) check_half_servable(ms, c.batch, recipe.optimizer, target);
  json budget;
  const CheckpointPolicy checkpoint = resolve_checkpoint(c, ms, recipe, budget);
  check_split_can_fit(c, ms, recipe, checkpoint);
  prepare_devices(c);
  OOMLAB_CHECK(c.batch <= data.train->size(), "impossible batch: --batch ", c.batch, " is larger than the ",
               data.train->name(), " training set (", data.train->size(), " samples)");

  const ModelConfig mc = run_model_config(c, data, seq_len);
  std::mutex init_mu;   // builders may run on several rank threads
  json init_report;
  ModelBuilder build = [&](Device d) {   // the model (and, data-parallel, each replica or rank's copy)
    ModelConfig m = mc;
    m.device = d;
    nn::ModulePtr model = build_model(c.model, m);
    if (!c.init.empty()) {   // PyTorch's load_state_dict(strict=...) from a safetensors file
      const LoadReport r = load_into(c.init, model->state_dict(), c.init_strict, graph_tied_names(c.model));
      std::lock_guard<std::mutex> lk(init_mu);
      if (init_report.is_null()) {
        init_report = {
            {"file", c.init}, {"strict", c.init_strict}, {"missing", r.missing}, {"unexpected", r.unexpected}};
        if (!c.quiet) print_init_report(c.init, r);
      }
    }
    apply_checkpoint_plan(*model, plan_checkpoints(*model, model_probe_input(c.model, m), checkpoint));
    return model;
  };
  TrainerConfig t = trainer_config(c, recipe, config_json(c, recipe, given));
  if (!budget.is_null()) t.config["checkpoint_budget"] = budget;
  if (c.dataset == "npy") {   // what the files decided, for the results and resume checks
    t.config["num_classes"] = data.train->num_classes();
    if (tokens) t.config["seq_len"] = seq_len;
    else t.config["input"] = data.train->sample_shape();
    t.config["test_split"] = data.test == data.train ? "train (no test_inputs.npy)" : "test";
  }
  json results = train_parallel(c, t, build, *data.train, *data.test);
  if (!init_report.is_null()) results["config"]["init_report"] = init_report;   // filled by the first build
  if (c.record_history) OpProfiler::enable(false);
  return results;
}

}  // namespace oomlab
