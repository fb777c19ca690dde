// commands.cpp — flag parsing and console output of the oomlab subcommands; the work
// itself lives in train_command.cpp, memory_report.cpp and runner/experiment_runner.cpp.
// Output paths (--json, --memory-snapshot, --chrome-trace) are checked before any work.
// On OutOfMemoryError the requested --memory-snapshot / --chrome-trace are still written
// (they show the OOM), then the error propagates (exit 2); --json is never written then.
#include "experiments/cli/commands.h"

#include "experiments/cli/allreduce_bench.h"

#include "engine/autograd/autocast.h"
#include "engine/train/mixed_precision.h"
#include "engine/train/oom_recovery.h"
#include "engine/nn/checkpoint_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/memory_export.h"
#include "experiments/cli/cli_args.h"
#include "experiments/cli/memory_report.h"
#include "engine/train/results.h"
#include "experiments/cli/parallel_train.h"
#include "experiments/cli/train_command.h"
#include "experiments/cli/tricks.h"
#include "models/model_zoo.h"

namespace oomlab {
namespace {
bool wants_help(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

// --checkpoint: the policy's canonical text; a budget's SIZE is checked here (exit 2 early).
std::string checkpoint_flag(const CliArgs& a) {
  const CheckpointPolicy p = parse_checkpoint_policy(a.get("checkpoint", "none"));
  if (p.kind == CheckpointPolicy::Kind::budget) {
    try {
      OOMLAB_CHECK(parse_size(p.budget) > 0, "must be > 0");
    } catch (const ValueError& e) {
      throw ValueError(str_cat("--checkpoint ", p.spec, ": bad size '", p.budget, "': ", e.what()));
    }
  }
  return p.spec;
}

// --amp / --half / --master-weights / --loss-scale: canonical texts, checked here (exit 2
// before any work). A flag that would be silently ignored is an error: --loss-scale without
// 16-bit training, --master-weights without --half; --half excludes --amp. --half scales the
// loss only with --master-weights (auto: dynamic there, none for plain --half).
struct PrecisionFlags {
  std::string amp = "off";
  bool half = false, master_weights = false;
  std::string loss_scale = "none";
};
std::string amp_flag(const CliArgs& a) { return amp_name(parse_amp(a.get("amp", "off"))); }
PrecisionFlags precision_flags(const CliArgs& a) {
  PrecisionFlags p;
  p.amp = amp_flag(a);
  p.half = a.flag("half");
  p.master_weights = a.flag("master-weights");
  OOMLAB_CHECK(!p.master_weights || p.half, "--master-weights applies to --half (autocast keeps float32 weights already)");
  OOMLAB_CHECK(!p.half || p.amp == "off", "--half and --amp ", p.amp,
               " are two ways to train in 16 bits: give one");
  OOMLAB_CHECK(!a.has("loss-scale") || p.amp != "off" || p.half,
               "--loss-scale has no effect without --amp fp16|bf16 or --half");
  const std::string given = a.get("loss-scale", "auto");
  OOMLAB_CHECK(!p.half || p.master_weights || given == "auto" || given == "none", "--loss-scale ", given,
               " with --half needs --master-weights: unscaling float16 gradients in float16 flushes the small ones "
               "to zero again (PyTorch's GradScaler refuses them too)");
  p.loss_scale = parse_loss_scale(given, p.amp == "fp16" || p.master_weights).str();
  return p;
}

ModelSpec model_spec(const CliArgs& a) {
  ModelSpec s;
  s.model = a.get("model", "");
  OOMLAB_CHECK(!s.model.empty(), "--model is required (one of: ", [] {
    std::string n;
    for (const auto& m : model_names()) n += (n.empty() ? "" : ", ") + m;
    return n;
  }(), ")");
  if (auto in = a.get_opt("input")) s.input = parse_int_list(*in, "--input");
  s.num_classes = a.get_int("classes", 0);
  s.seq_len = a.get_int("seq-len", 0);
  OOMLAB_CHECK(!a.has("seq-len") || s.seq_len >= 1, "--seq-len must be >= 1 (got ", s.seq_len, ")");
  s.arch = arch_flags(a, s.model);
  s.checkpoint = checkpoint_flag(a);
  const PrecisionFlags p = precision_flags(a);
  s.amp = p.amp;
  s.half = p.half;
  s.master_weights = p.master_weights;
  s.loss_scale = p.loss_scale;
  return s;
}


namespace {
// --dataset and the flags that describe its data; a flag this dataset would ignore is an error.
void dataset_flags(const CliArgs& a, TrainConfig& c) {
  c.dataset = a.get("dataset", c.dataset);
  OOMLAB_CHECK(c.dataset == "fashion-mnist" || c.dataset == "synthetic" || c.dataset == "synthetic-seq" ||
                   c.dataset == "synthetic-seg" || c.dataset == "npy",
               "--dataset must be fashion-mnist, synthetic, synthetic-seq, synthetic-seg or npy (got '", c.dataset, "')");
  c.data_dir = a.get("data-dir", "");
  if (auto in = a.get_opt("input")) c.input = parse_int_list(*in, "--input");
  const bool seq = c.dataset == "synthetic-seq", fmnist = c.dataset == "fashion-mnist", npy = c.dataset == "npy";
  // The classes the dataset has (recorded in results config): synthetic-seq is binary; npy
  // infers max label + 1 unless --classes says more.
  c.num_classes = a.get_int("classes", c.dataset == "synthetic-seg" ? 4 : seq ? 2 : npy ? 0 : c.num_classes);
  OOMLAB_CHECK(c.dataset != "synthetic-seq" || !a.has("classes"), "--classes: synthetic-seq has 2 classes");
  OOMLAB_CHECK(!a.has("classes") || c.num_classes >= 1, "--classes must be >= 1 (got ", c.num_classes, ")");
  OOMLAB_CHECK(!npy || a.has("data-dir"), "--dataset npy needs --data-dir DIR holding train_inputs.npy and "
               "train_labels.npy (README: \"Your own data\")");
  auto only_with = [&](const char* flag, bool ok, const char* which) {
    OOMLAB_CHECK(!a.has(flag) || ok, "--", flag, " has no effect with --dataset ", c.dataset, " (it applies to ", which,
                 ")");
  };
  const bool synthetic = !fmnist && !npy;
  only_with("data-dir", fmnist || npy, "fashion-mnist and npy");
  only_with("input", synthetic && !seq, "synthetic and synthetic-seg; npy takes the files' shape");
  only_with("classes", !fmnist, "synthetic, synthetic-seg and npy");
  only_with("synthetic-size", synthetic, "the synthetic datasets");
  for (const char* k : {"seq-min-len", "long-seq-prob", "long-seq-len"}) only_with(k, seq, "synthetic-seq");
  only_with("seq-len", seq, "synthetic-seq; npy takes the files' length");
  c.shuffle = !a.flag("no-shuffle");
  c.seq_len = a.get_int("seq-len", c.seq_len);
  c.seq_min_len = a.get_int("seq-min-len", 0);
  OOMLAB_CHECK(c.seq_min_len >= 0, "--seq-min-len must be >= 0 (got ", c.seq_min_len, ")");
  c.long_seq_prob = a.get_double("long-seq-prob", 0.0);
  c.long_seq_len = a.get_int("long-seq-len", 0);
  OOMLAB_CHECK(c.seq_len >= 3, "--seq-len must be >= 3 (got ", c.seq_len, ")");
  c.synthetic_size = a.get_int("synthetic-size", c.synthetic_size);
  OOMLAB_CHECK(c.synthetic_size >= 1, "--synthetic-size must be >= 1 (got ", c.synthetic_size, ")");
  OOMLAB_CHECK(c.long_seq_prob >= 0 && c.long_seq_prob <= 1, "--long-seq-prob must be in [0, 1] (got ",
               c.long_seq_prob, ")");
  OOMLAB_CHECK(!a.has("long-seq-prob") || a.has("long-seq-len"), "--long-seq-prob needs --long-seq-len");
  OOMLAB_CHECK(!a.has("long-seq-len") || a.has("long-seq-prob"), "--long-seq-len needs --long-seq-prob");
}

// The run's length, recipe (flags not given keep the model family's defaults, recipes.h),
// checkpoints and logging.
void run_flags(const CliArgs& a, TrainConfig& c) {
  c.init = a.get("init", "");
  c.init_strict = !a.flag("init-non-strict");
  OOMLAB_CHECK(!a.has("init") || !c.init.empty(), "--init needs a FILE.safetensors");
  OOMLAB_CHECK(!a.flag("init-non-strict") || a.has("init"), "--init-non-strict has no effect without --init FILE");
  OOMLAB_CHECK(!a.has("init") || !a.has("resume"), "--init and --resume both set the starting weights: give one");
  c.batch = a.get_int("batch", c.batch);
  c.accumulate = a.get_int("accumulate", 1);
  c.epochs = a.get_int("epochs", c.epochs);
  c.steps = a.get_int("steps", 0);
  OOMLAB_CHECK(!(a.has("epochs") && a.has("steps")), "give --epochs or --steps, not both");
  if (a.has("optimizer")) c.optimizer = a.get("optimizer", "");
  if (a.has("lr")) c.lr = a.get_double("lr", 0.0);
  if (a.has("momentum")) c.momentum = a.get_double("momentum", 0.0);
  if (a.has("weight-decay")) c.weight_decay = a.get_double("weight-decay", 0.0);
  c.nesterov = a.flag("nesterov");
  if (a.has("schedule")) c.schedule = a.get("schedule", "");
  c.ema_decay = a.get_double("ema", 0.0);
  const int64_t seed = a.get_int("seed", 0);
  OOMLAB_CHECK(seed >= 0, "--seed must be >= 0 (got ", seed, ")");
  c.seed = uint64_t(seed);
  c.save_dir = a.get("save", "");
  c.save_every = a.get_int("save-every", 0);
  c.resume_dir = a.get("resume", "");
  c.eval_batches = a.get_int("eval-batches", -1);
  c.log_every = a.get_int("log-every", c.log_every);
  c.quiet = a.flag("quiet");
  OOMLAB_CHECK(c.batch >= 1, "--batch must be >= 1 (got ", c.batch, ")");
  OOMLAB_CHECK(c.epochs >= 1, "--epochs must be >= 1 (got ", c.epochs, ")");
  OOMLAB_CHECK(!a.has("steps") || c.steps >= 1, "--steps must be >= 1 (got ", c.steps, ")");
  OOMLAB_CHECK(!c.lr || *c.lr > 0, "--lr must be > 0");
  OOMLAB_CHECK(c.ema_decay >= 0 && c.ema_decay < 1, "--ema must be in [0, 1)");
  OOMLAB_CHECK(c.eval_batches >= -1, "--eval-batches must be >= 0, or -1 for the whole test set (got ",
               c.eval_batches, ")");
  OOMLAB_CHECK(c.log_every >= 0, "--log-every must be >= 0 (got ", c.log_every, ")");
  OOMLAB_CHECK(c.save_every >= 0, "--save-every must be >= 0 (got ", c.save_every, ")");
  OOMLAB_CHECK(!a.has("save-every") || a.has("save"), "--save-every has no effect without --save DIR");
}
}  // namespace

TrainConfig train_config(const CliArgs& a) {
  TrainConfig c;
  c.model = a.get("model", c.model);
  dataset_flags(a, c);
  c.device = parse_device(a.get("device", "cpu"));
  run_flags(a, c);
  if (a.has("device-memory")) c.device_memory = parse_size(a.get("device-memory", ""));
  c.arch = arch_flags(a, c.model);
  c.checkpoint = checkpoint_flag(a);
  parallel_flags(a, c);
  const PrecisionFlags p = precision_flags(a);
  c.amp = p.amp;
  c.half = p.half;
  c.master_weights = p.master_weights;
  c.loss_scale = p.loss_scale;
  c.on_oom = a.get("on-oom", "raise");
  const int64_t workers = a.get_int("workers", 1);
  OOMLAB_CHECK(workers >= 0 && workers <= 64, "--workers must be in 0..64 (got ", workers, ")");
  c.workers = int(workers);
  c.pin_memory = a.flag("pin-memory");
  parse_on_oom(c.on_oom);   // names a bad value now
  const std::string on_nan = a.get("on-nan", "stop");
  OOMLAB_CHECK(on_nan == "stop" || on_nan == "continue", "--on-nan must be stop or continue (got '", on_nan, "')");
  c.stop_on_nan = on_nan == "stop";
  return c;
}

// --json and the trace files: writable files, checked before any work.
void check_output_paths(const CliArgs& a) {
  for (const char* k : {"json", "memory-snapshot", "chrome-trace"})
    if (auto path = a.get_opt(k)) check_output_file(*path, str_cat("--", k));
}

int64_t summary_batch(const CliArgs& a) {
  const int64_t batch = a.get_int("batch", 1);
  OOMLAB_CHECK(batch >= 1, "--batch must be >= 1 (got ", batch, ")");
  return batch;
}

struct EstimateRequest {
  int64_t batch = 1;
  std::string optimizer;
  uint64_t capacity = 0;
};
EstimateRequest estimate_request(const CliArgs& a) {
  OOMLAB_CHECK(a.has("batch"), "--batch is required");
  EstimateRequest r;
  r.batch = summary_batch(a);
  r.optimizer = a.get("optimizer", "sgd");
  OOMLAB_CHECK(r.optimizer == "sgd" || r.optimizer == "adam" || r.optimizer == "adamw",
               "--optimizer must be sgd, adam or adamw (got '", r.optimizer, "')");
  r.capacity = a.has("device-memory") ? parse_size(a.get("device-memory", "")) : 0;
  return r;
}


// --memory-snapshot FILE (pytorch.org/memory_viz) and --chrome-trace FILE (Perfetto).
void write_traces_if_asked(const CliArgs& a, const Device& dev) {
  if (auto path = a.get_opt("memory-snapshot")) {
    write_json_atomic(*path, memory_snapshot_json(allocator_for(dev)), -1);
    std::printf("wrote %s (open it at pytorch.org/memory_viz)\n", path->c_str());
  }
  if (auto path = a.get_opt("chrome-trace")) {
    write_json_atomic(*path, chrome_trace_json(allocator_for(dev), OpProfiler::take()), -1);
    std::printf("wrote %s (open it in ui.perfetto.dev or chrome://tracing)\n", path->c_str());
  }
}

// Runs work(); on OutOfMemoryError writes the requested snapshot/trace (the allocator's
// trace ends with the "oom" event: what pytorch.org/memory_viz should show), then rethrows.
template <class F> auto with_traces_on_oom(const CliArgs& a, const Device& dev, F&& work) {
  try {
    return work();
  } catch (const OutOfMemoryError&) {
    OpProfiler::enable(false);
    write_traces_if_asked(a, dev);
    throw;
  }
}

// --allow-tf32 none|cudnn|all (PyTorch's default: cudnn), --cudnn-benchmark on|off,
// --cudnn-workspace-limit SIZE: numerics switches of accelerator backends, each applied
// only when given (the others keep the backend's defaults / OOMLAB_* environment); the
// switches in force are recorded in results under context.device_properties.
BackendOptions backend_options(const CliArgs& a) {
  BackendOptions o;
  if (a.has("allow-tf32")) {
    const std::string tf32 = a.get("allow-tf32", "");
    OOMLAB_CHECK(tf32 == "none" || tf32 == "cudnn" || tf32 == "all",
                 "--allow-tf32 must be none, cudnn or all (got '", tf32, "')");
    o.matmul_allow_tf32 = tf32 == "all";
    o.cudnn_allow_tf32 = tf32 != "none";
  }
  if (a.has("cudnn-benchmark")) o.cudnn_benchmark = parse_switch(a.get("cudnn-benchmark", ""), "--cudnn-benchmark");
  if (a.has("cudnn-workspace-limit")) o.cudnn_workspace_limit = parse_size(a.get("cudnn-workspace-limit", ""));
  return o;
}

void write_json_if_asked(const CliArgs& a, const nlohmann::json& j) {
  if (auto path = a.get_opt("json")) {
    write_json_atomic(*path, j);
    std::printf("wrote %s\n", path->c_str());
  }
}
}  // namespace

const CommandFlags& command_flags(const std::string& command) {
  static const std::map<std::string, CommandFlags> flags = {
      {"summary", {with_arch_flags({"model", "input", "seq-len", "classes", "batch", "checkpoint", "amp", "json"}), {}}},
      {"estimate", {with_arch_flags({"model", "input", "seq-len", "classes", "batch", "optimizer", "device-memory", "checkpoint",
                                     "amp", "loss-scale", "json", "memory-snapshot", "chrome-trace"}),
                    {"half", "master-weights"}}},
      {"train", {with_arch_flags({"allow-tf32", "cudnn-benchmark", "cudnn-workspace-limit", "model", "dataset",
                                  "data-dir", "input", "classes", "synthetic-size", "seq-len", "seq-min-len",
                                  "long-seq-prob", "long-seq-len", "device", "batch", "epochs", "steps", "optimizer",
                                  "lr", "momentum", "weight-decay", "schedule", "ema", "seed", "device-memory", "save",
                                  "save-every", "resume", "on-nan", "on-oom", "workers", "checkpoint", "accumulate", "amp", "loss-scale", "eval-batches", "log-every", "json", "memory-snapshot",
                                  "chrome-trace", "parallel", "devices", "gpu0-bsz", "bucket-cap", "backend", "init"}),
                 {"nesterov", "quiet", "half", "master-weights", "pin-memory", "sync-bn", "no-shuffle",
                  "init-non-strict"}}},
      {"trick", {{"name", "batch", "json"}, {}}},
      {"allreduce-bench", {allreduce_bench_flags(), {}}}};
  auto it = flags.find(command);
  OOMLAB_CHECK(it != flags.end(), "unknown command '", command, "' (train, summary, estimate, trick or allreduce-bench)");
  return it->second;
}

int cmd_models(const std::vector<std::string>&) {
  for (const auto& m : model_names()) std::printf("%s\n", m.c_str());
  return 0;
}

int cmd_amp_policy(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::puts("oomlab amp-policy [--json FILE]\n  the per-op autocast policy of --amp fp16|bf16");
    return 0;
  }
  CliArgs a(args, {"json"}, {}, "amp-policy");
  check_output_paths(a);
  std::printf("%-20s %-13s %s\n", "op", "policy", "what it does under --amp fp16|bf16");
  nlohmann::json rows = nlohmann::json::array();
  for (const AutocastRule& r : autocast_rules()) {
    std::printf("%-20s %-13s %s\n", r.op, cast_policy_name(r.policy), r.why);
    rows.push_back({{"op", r.op}, {"policy", cast_policy_name(r.policy)}, {"why", r.why}});
  }
  std::puts("other ops (relu, gelu, dropout, pooling, upsample, embedding, views) run in their input's dtype; "
            "float64 is never lowered;\nparameters, gradients and optimizer state stay float32 (master weights)");
  write_json_if_asked(a, make_results("amp-policy", cpu_device(), nlohmann::json::object(), {{"rules", rows}}));
  return 0;
}

int cmd_summary(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::printf("oomlab summary --model M [--input C,H,W | --seq-len T] [--classes K] [--batch B] [--checkpoint POLICY]\n"
                "  [--amp off|fp16|bf16] [--json FILE]\n  %s\n",
                kArchUsage);
    return 0;
  }
  const CommandFlags& f = command_flags("summary");
  CliArgs a(args, f.valued, f.switches, "summary");
  ModelSpec spec = model_spec(a);
  const int64_t batch = summary_batch(a);
  check_output_paths(a);
  ModelSummary s = summarize_model(spec, batch);
  std::printf("%-28s %-18s %-18s %12s %12s %-16s %14s %14s\n", "layer", "type", "output", "values/img",
              "params", "compute dtype", "output bytes", "saved bytes");
  for (const LayerRow& r : s.layers)
    std::printf("%-28s %-18s %-18s %12lld %12lld %-16s %14s %14s\n", r.name.c_str(), r.type.c_str(),
                shape_str(r.output_shape).c_str(), (long long)r.output_values, (long long)r.params,
                r.compute_dtype.c_str(), format_bytes(double(r.output_bytes)).c_str(),
                format_bytes(double(r.saved_bytes)).c_str());
  std::printf("total params %lld; activation values per sample %lld (%s fp32); saved for backward %s "
              "(batch %lld); forward-only peak %s; training-forward peak %s\n",
              (long long)s.params, (long long)s.activation_values_per_sample,
              format_bytes(4.0 * double(s.activation_values_per_sample)).c_str(),
              format_bytes(double(s.saved_bytes)).c_str(), (long long)s.batch,
              format_bytes(double(s.forward_only_peak_bytes)).c_str(),
              format_bytes(double(s.training_forward_peak_bytes)).c_str());
  if (s.nonleaf_saved_bytes > 0)
    std::printf("saved for backward by code in non-leaf modules (not in the rows above): %s\n",
                format_bytes(double(s.nonleaf_saved_bytes)).c_str());
  if (!s.transformer_layers.empty()) {
    std::printf("\n%-28s %14s %18s %18s %8s\n", "transformer layer", "saved (ours)", "Korthikanti fp16",
                "Korthikanti fp32", "ours/fp32");
    for (const TransformerLayerRow& t : s.transformer_layers)
      std::printf("%-28s %14s %18s %18s %8.3f\n", t.name.c_str(), format_bytes(double(t.saved_bytes)).c_str(),
                  format_bytes(double(t.korthikanti_fp16_bytes)).c_str(),
                  format_bytes(double(t.korthikanti_fp32_bytes)).c_str(),
                  double(t.saved_bytes) / double(std::max<int64_t>(1, t.korthikanti_fp32_bytes)));
  }
  nlohmann::json cfg = {{"model", spec.model}, {"input", s.input}, {"batch", s.batch}, {"checkpoint", spec.checkpoint},
                        {"amp", spec.amp}};
  cfg.update(spec.arch.to_json(spec.model));
  write_json_if_asked(a, make_results("summary", meta_device(), cfg, s.to_json()));
  return 0;
}

int cmd_estimate(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::puts("oomlab estimate --model M --batch B [--optimizer sgd|adam|adamw] [--input C,H,W | --seq-len T] "
              "[--classes K] [--device-memory SIZE] [--checkpoint POLICY]\n  [--amp off|fp16|bf16 | --half [--master-weights]] [--loss-scale auto|dynamic|static:S|none] [--json FILE] [--memory-snapshot FILE] "
              "[--chrome-trace FILE]");
    std::printf("  %s\n", kArchUsage);
    return 0;
  }
  const CommandFlags& f = command_flags("estimate");
  CliArgs a(args, f.valued, f.switches, "estimate");
  ModelSpec spec = model_spec(a);
  const EstimateRequest r = estimate_request(a);
  const std::string& opt = r.optimizer;
  const uint64_t cap = r.capacity;
  check_output_paths(a);
  const bool record = a.has("memory-snapshot") || a.has("chrome-trace");
  nlohmann::json budget;
  if (spec.checkpoint.rfind("budget:", 0) == 0) {
    const CheckpointBudgetChoice ch = choose_checkpoint_budget(
        spec, r.batch, opt, parse_size(parse_checkpoint_policy(spec.checkpoint).budget));
    std::printf("--checkpoint %s: %s (exact meta peak %s; tried %zu plans)\n", spec.checkpoint.c_str(),
                ch.policy.c_str(), format_bytes(double(ch.predicted_peak_bytes)).c_str(), ch.tried.size());
    budget = ch.to_json();
    spec.checkpoint = ch.policy;
  }
  MemoryEstimate e = with_traces_on_oom(a, meta_device(), [&] { return estimate_memory(spec, r.batch, opt, cap, record); });
  auto row = [](const char* what, int64_t exact, const char* formula_what, int64_t formula) {
    std::printf("  %-22s %14s   %-30s %14s\n", what, format_bytes(double(exact)).c_str(), formula_what,
                formula < 0 ? "" : format_bytes(double(formula)).c_str());
  };
  std::printf("%s, batch %lld, %s: %lld params, %lld output values per sample\n", e.model.c_str(),
              (long long)e.batch, e.optimizer.c_str(), (long long)e.params, (long long)e.outputs_per_sample);
  std::printf("  %-22s %14s   %-30s %14s\n", "component (exact, meta)", "bytes", "source formula", "bytes");
  row("params", e.params_bytes, "params x n (n=2 SGD, 4 Adam)", e.formula_params_bytes);
  row("buffers (BN stats)", e.buffers_bytes, "-", -1);
  row("grads", e.grads_bytes, "(inside params x n)", -1);
  row("optimizer state", e.optimizer_state_bytes, "(inside params x n)", -1);
  if (spec.master_weights) row("master weights (fp32)", e.master_weights_bytes, "-", -1);
  row("input batch", e.input_bytes, "input batch", e.formula_input_bytes);
  row("activations (saved)", e.activation_bytes, "batch x outputs x 2", e.formula_activation_bytes);
  row("transient over fwd", e.transient_bytes, "-", -1);
  row("PEAK allocated", e.peak_allocated_bytes, "TOTAL", e.formula_bytes);
  row("peak reserved", e.peak_reserved_bytes, "-", -1);
  std::printf("  formula error: %+.1f%%\n", e.formula_error_pct);
  nlohmann::json cfg = {{"model", spec.model},  {"batch", e.batch}, {"optimizer", opt}, {"device_memory", cap},
                        {"checkpoint", spec.checkpoint}, {"amp", spec.amp}, {"half", spec.half},
                        {"master_weights", spec.master_weights}, {"loss_scale", spec.loss_scale}};
  if (!budget.is_null()) cfg["checkpoint_budget"] = budget;
  cfg.update(spec.arch.to_json(spec.model));
  write_json_if_asked(a, make_results("estimate", meta_device(), cfg, e.to_json()));
  write_traces_if_asked(a, meta_device());
  return 0;
}

int cmd_train(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::puts("oomlab train --model M --dataset fashion-mnist|synthetic|synthetic-seq|synthetic-seg|npy\n"
              "  [--data-dir DIR] [--input C,H,W] [--classes K] [--synthetic-size N] [--no-shuffle]\n"
              "  [--init FILE.safetensors [--init-non-strict]]\n"
              "  [--seq-len N] [--seq-min-len N] [--long-seq-prob P --long-seq-len N] [--device cpu|meta|cuda[:i]] [--batch B]\n"
              "  [--epochs E | --steps S] [--accumulate K] [--optimizer sgd|adam|adamw] [--lr X] [--momentum X]\n"
              "  [--weight-decay X] [--nesterov] [--schedule SPEC] [--ema DECAY] [--seed N]\n"
              "  [--device-memory SIZE] [--save DIR] [--save-every S] [--resume DIR] [--on-nan stop|continue]\n"
              "  [--on-oom raise|skip|split] [--workers N] [--pin-memory] [--checkpoint none|all|every:K|sqrt|selective[:KINDS]]\n"
              "  [--amp off|fp16|bf16 | --half [--master-weights]] [--loss-scale auto|dynamic|static:S|none]\n"
              "  [--eval-batches N] [--log-every N] [--quiet] [--json FILE]\n"
              "  [--parallel none|dp|bdp|ddp] [--devices N] [--gpu0-bsz B0] [--bucket-cap SIZE] [--sync-bn]\n"
              "  [--backend gloo|mpi|nccl (ddp under mpirun / torchrun / srun)]\n"
              "  [--memory-snapshot FILE] [--chrome-trace FILE]\n"
              "  [--allow-tf32 none|cudnn|all] [--cudnn-benchmark on|off] [--cudnn-workspace-limit SIZE]");
    std::printf("  %s\n", kArchUsage);
    return 0;
  }
  const CommandFlags& f = command_flags("train");
  CliArgs a(args, f.valued, f.switches, "train");
  TrainConfig c = train_config(a);
  check_train_config(c);
  check_output_paths(a);
  if (std::optional<int> job = self_launch_ddp(c, args)) return *job;   // ddp processes without a launcher
  c.record_history = a.has("memory-snapshot") || a.has("chrome-trace");
  set_backend_options(backend_options(a));
  nlohmann::json results = with_traces_on_oom(a, c.device, [&] { return train(c); });
  // DDP under a launcher: every rank trains, rank 0 writes.
  if (results["metrics"].contains("ddp") && results["metrics"]["ddp"].value("rank", 0) != 0) return 0;
  write_json_if_asked(a, results);
  write_traces_if_asked(a, c.device);
  if (results.contains("metrics") && results["metrics"].contains("diverged_at_step")) {
    std::fprintf(stderr, "oomlab: diverged: the loss became %s at step %lld (exit %d)\n",
                 results["metrics"].value("diverged_loss", "NaN").c_str(),
                 (long long)results["metrics"]["diverged_at_step"].get<int64_t>(), kExitDiverged);
    return kExitDiverged;
  }
  return 0;
}

void check_command_args(const std::string& command, const std::vector<std::string>& args) {
  if (command == "allreduce-bench") {
    check_allreduce_bench_args(args);
    return;
  }
  const CommandFlags& f = command_flags(command);
  CliArgs a(args, f.valued, f.switches, command);
  if (command == "trick") {
    const std::vector<std::string> names = trick_names();
    OOMLAB_CHECK(std::find(names.begin(), names.end(), a.get("name", "")) != names.end(), "unknown trick '",
                 a.get("name", ""), "'");
    OOMLAB_CHECK(a.get_int("batch", 64) >= 1, "--batch must be >= 1");
    check_output_paths(a);
    return;
  }
  if (command == "train") {
    check_train_config(train_config(a));
  } else {
    model_spec(a);
    if (command == "estimate") estimate_request(a);
    else summary_batch(a);
  }
  backend_options(a);
  check_output_paths(a);
}


}  // namespace oomlab
