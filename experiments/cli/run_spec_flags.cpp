// run_spec_flags.cpp — flags into a RunSpec, each parsed once (run_spec_flags.h).
#include "experiments/cli/run_spec_flags.h"

#include "engine/autograd/autocast.h"
#include "engine/core/error.h"
#include "experiments/cli/cli_args.h"
#include "experiments/cli/flag_table.h"
#include "models/graph_model.h"
#include "models/model_zoo.h"

namespace oomlab {
namespace {

// Every flag given to this command whose table row names a model use, checked against `model`.
void check_model_flags(const CliArgs& a, const std::string& model) {
  for (const FlagSpec* f : flags_of(a.command()))
    if (!f->models.empty() && a.has(f->name)) check_model_use(f->name, f->models, model);
}

}  // namespace

ArchOverrides arch_flags(const CliArgs& a, const std::string& model) {
  ArchOverrides o;
  o.hidden = a.get_int("hidden", 0);
  o.layers = a.get_int("layers", 0);
  o.heads = a.get_int("heads", 0);
  o.max_positions = a.get_int("max-positions", 0);
  o.base_width = a.get_int("base-width", 0);
  o.depth = a.get_int("depth", 0);
  if (a.has("dropout")) o.dropout = a.get_double("dropout");
  o.norm = a.get("norm");
  o.attention = a.get("attention");
  o.fuse_relu = a.get("fuse-relu");
  check_model_flags(a, model);
  return o;
}

namespace {

// --checkpoint: its text parsed here and nowhere else; a budget's SIZE is checked too.
CheckpointPolicy checkpoint_flag(const CliArgs& a) {
  CheckpointPolicy p = with_flag_name("checkpoint", [&] { return parse_checkpoint_policy(a.get("checkpoint")); });
  if (p.kind == CheckpointPolicy::Kind::budget) {
    try {
      p.budget_bytes = parse_size(p.budget);
      OOMLAB_CHECK(p.budget_bytes > 0, "must be > 0");
    } catch (const ValueError& e) {
      throw ValueError(str_cat("--checkpoint ", p.spec, ": bad size '", p.budget, "': ", e.what()));
    }
  }
  return p;
}

// --amp / --half / --master-weights / --loss-scale. The table rules out --master-weights
// without --half and --half with --amp fp16|bf16; here: --loss-scale without 16-bit training
// has no effect, and --half scales the loss only with --master-weights (auto: dynamic
// there, none for plain --half).
void precision_flags(const CliArgs& a, RunSpec& s) {
  s.amp = parse_amp(a.get("amp"));
  s.half = a.has("half") && a.flag("half");
  s.master_weights = a.has("master-weights") && a.flag("master-weights");
  OOMLAB_CHECK(!a.has("loss-scale") || s.amp || s.half, "--loss-scale has no effect without --amp fp16|bf16 or --half");
  const std::string given = a.has("loss-scale") ? a.get("loss-scale") : "auto";
  OOMLAB_CHECK(!s.half || s.master_weights || given == "auto" || given == "none", "--loss-scale ", given,
               " with --half needs --master-weights: unscaling float16 gradients in float16 flushes the small ones "
               "to zero again (PyTorch's GradScaler refuses them too)");
  const bool fp16 = s.amp == DType::f16 || s.master_weights;
  s.loss_scale = with_flag_name("loss-scale", [&] { return parse_loss_scale(given, fp16); });
}

// The model, the architecture and the techniques every command of a run shares.
void model_and_technique_flags(const CliArgs& a, RunSpec& s) {
  s.model = a.get("model");
  if (auto in = a.get_opt("input")) s.input = parse_int_list(*in, "--input");
  s.arch = arch_flags(a, s.model);
  s.checkpoint = checkpoint_flag(a);
  precision_flags(a, s);
  s.cuda_graphs = a.has("cuda-graphs") && a.flag("cuda-graphs");
  s.channels_last = a.has("channels-last") && a.flag("channels-last");
  check_run_model_techniques(s);
}

// --dataset and the flags that describe its data (the table says which dataset each applies to).
void dataset_flags(const CliArgs& a, RunSpec& c) {
  c.dataset = a.get("dataset");
  c.data_dir = a.get("data-dir");
  const bool seq = c.dataset == "synthetic-seq", npy = c.dataset == "npy";
  // The classes the dataset has (recorded in results config): synthetic-seq is binary; npy
  // infers max label + 1 unless --classes says more; an imported classifier's data have the
  // classes of its output (--classes does not apply to it: the model table's "classes").
  const int64_t graph_classes = is_graph_model(c.model) ? graph_model_config(c.model).num_classes : 0;
  c.num_classes = a.get_int("classes", c.dataset == "synthetic-seg" ? 4 : seq ? 2 : graph_classes > 0 ? graph_classes
                                                                                 : npy ? 0 : c.num_classes);
  OOMLAB_CHECK(!seq || graph_classes == 0 || graph_classes >= 2, "--dataset synthetic-seq is a 2-class task and --model ",
               c.model, " has ", graph_classes, " output class(es)");
  OOMLAB_CHECK(!npy || a.has("data-dir"), "--dataset npy needs --data-dir DIR holding train_inputs.npy and "
               "train_labels.npy (README: \"Your own data\")");
  c.shuffle = !a.flag("no-shuffle");
  c.seq_len = a.get_int("seq-len");
  c.seq_min_len = a.get_int("seq-min-len", 0);
  c.long_seq_prob = a.get_double("long-seq-prob", 0.0);
  c.long_seq_len = a.get_int("long-seq-len", 0);
  c.synthetic_size = a.get_int("synthetic-size");
}

// The run's length, recipe (flags not given keep the model family's defaults, recipes.h),
// checkpoints and logging; ranges and rules between these flags are the table's.
void run_flags(const CliArgs& a, RunSpec& c) {
  c.init = a.get("init");
  c.init_strict = !a.flag("init-non-strict");
  c.batch = a.get_int("batch");
  c.accumulate = a.get_int("accumulate");
  c.epochs = a.get_int("epochs");
  c.steps = a.get_int("steps", 0);
  if (a.has("optimizer")) c.optimizer = a.get("optimizer");
  if (a.has("lr")) c.lr = a.get_double("lr");
  if (a.has("momentum")) c.momentum = a.get_double("momentum");
  if (a.has("weight-decay")) c.weight_decay = a.get_double("weight-decay");
  c.nesterov = a.flag("nesterov");
  if (a.has("schedule")) c.schedule = a.get("schedule");
  c.ema_decay = a.get_double("ema", 0.0);
  c.lr_groups = parse_lr_groups(a.get("lr-groups"));
  c.tta_flip = a.get("tta") == "flip";
  c.seed = uint64_t(a.get_int("seed"));
  c.save_dir = a.get("save");
  c.save_every = a.get_int("save-every", 0);
  c.resume_dir = a.get("resume");
  c.eval_batches = a.get_int("eval-batches");
  c.log_every = a.get_int("log-every");
  c.quiet = a.flag("quiet");
}

// --parallel, --devices, --gpu0-bsz, --bucket-cap, --sync-bn, --backend, --timeout.
void parallel_flags(const CliArgs& a, RunSpec& c) {
  c.parallel = parse_parallel_mode(a.get("parallel"));
  c.devices = a.get_int("devices");
  if (a.has("gpu0-bsz")) c.gpu0_bsz = a.get_int("gpu0-bsz");
  if (a.has("bucket-cap")) c.bucket_cap = int64_t(parse_size(a.get("bucket-cap")));
  c.sync_bn = a.flag("sync-bn");
  c.backend = a.get("backend");
  c.timeout_s = a.get_double("timeout");
}
}  // namespace

RunSpec train_spec(const CliArgs& a) {
  RunSpec c;
  model_and_technique_flags(a, c);
  dataset_flags(a, c);
  c.device = parse_device(a.get("device"));
  run_flags(a, c);
  if (a.has("device-memory")) c.device_memory = parse_size(a.get("device-memory"));
  parallel_flags(a, c);
  c.on_oom = parse_on_oom(a.get("on-oom"));
  c.workers = int(a.get_int("workers"));
  c.pin_memory = a.flag("pin-memory");
  c.stop_on_nan = a.get("on-nan") == "stop";
  return c;
}

RunSpec model_spec(const CliArgs& a) {
  RunSpec s = RunSpec::for_model(a.get("model"));
  model_and_technique_flags(a, s);
  s.num_classes = a.get_int("classes", 0);
  s.seq_len = a.get_int("seq-len", 0);
  s.batch = a.get_int("batch");
  if (a.has("optimizer")) s.optimizer = a.get("optimizer");
  if (a.has("momentum")) s.momentum = a.get_double("momentum");
  if (a.has("device-memory")) s.device_memory = parse_size(a.get("device-memory"));
  return s;
}

}  // namespace oomlab
