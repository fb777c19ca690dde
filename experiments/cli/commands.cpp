// commands.cpp — flag parsing and console output of the oomlab subcommands; the work
// itself lives in train_command.cpp, memory_report.cpp and runner/experiment_runner.cpp.
// Output paths (--json, --memory-snapshot, --chrome-trace) are checked before any work.
// On OutOfMemoryError the requested --memory-snapshot / --chrome-trace are still written
// (they show the OOM), then the error propagates (exit 2); --json is never written then.
#include "experiments/cli/commands.h"


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
#include "engine/io/file_kinds.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/memory_export.h"
#include "experiments/cli/cli_args.h"
#include "experiments/cli/cli_output.h"
#include "experiments/cli/flag_table.h"
#include "experiments/cli/run_spec_flags.h"
#include "experiments/plan/comm_time.h"
#include "experiments/plan/gpu_table.h"
#include "experiments/plan/largest_batch.h"
#include "experiments/plan/memory_report.h"
#include "experiments/plan/time_model.h"
#include "engine/train/results.h"
#include "experiments/train/parallel_train.h"
#include "experiments/train/train_command.h"
#include "models/graph_model.h"
#include "models/model_zoo.h"

namespace oomlab {
bool print_help_if_asked(const std::string& command, const std::vector<std::string>& args) {
  if (!help_requested(args)) return false;
  std::fputs(command_help(command).c_str(), stdout);
  return true;
}

namespace {

// --json and the trace files: writable files, checked before any work.
void check_output_paths(const CliArgs& a) {
  for (const char* k : {"json", "memory-snapshot", "chrome-trace"})
    if (a.has(k)) check_output_file(a.get(k), str_cat("--", k));
}

// "wrote PATH" on standard output, unless PATH is standard output itself (the line would
// follow the JSON on the same stream).
void print_wrote(const std::string& path, const char* note = "") {
  if (!is_standard_output(path)) cli_printf("wrote %s%s\n", path.c_str(), note);
}

// --memory-snapshot FILE (pytorch.org/memory_viz) and --chrome-trace FILE (Perfetto).
void write_traces_if_asked(const CliArgs& a, const Device& dev) {
  if (auto path = a.get_opt("memory-snapshot")) {
    write_json_atomic(*path, memory_snapshot_json(allocator_for(dev)), -1);
    print_wrote(*path, " (open it at pytorch.org/memory_viz)");
  }
  if (auto path = a.get_opt("chrome-trace")) {
    write_json_atomic(*path, chrome_trace_json(allocator_for(dev), OpProfiler::take()), -1);
    print_wrote(*path, " (open it in ui.perfetto.dev or chrome://tracing)");
  }
}

// The snapshot and trace, then the results JSON last: a --json file that exists means every
// output of the run was written (a trace that fails to write, e.g. on a full disk, leaves no
// results file claiming success).
void write_outputs_if_asked(const CliArgs& a, const Device& dev, const nlohmann::json& results) {
  write_traces_if_asked(a, dev);
  write_json_if_asked(a, results);
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
// --cudnn-deterministic on|off, --cudnn-workspace-limit SIZE: numerics switches of accelerator backends, each applied
// only when given (the others keep the backend's defaults / OOMLAB_* environment); the
// switches in force are recorded in results under context.device_properties.
BackendOptions backend_options(const CliArgs& a) {
  BackendOptions o;
  if (a.has("allow-tf32")) {
    const Tf32Use tf32 = parse_tf32_use(a.get("allow-tf32"));
    o.matmul_allow_tf32 = tf32.matmul;
    o.cudnn_allow_tf32 = tf32.conv;
  }
  if (a.has("cudnn-benchmark")) o.cudnn_benchmark = a.get("cudnn-benchmark") == "on";
  if (a.has("cudnn-deterministic")) o.cudnn_deterministic = a.get("cudnn-deterministic") == "on";
  if (a.has("cudnn-workspace-limit")) o.cudnn_workspace_limit = parse_size(a.get("cudnn-workspace-limit"));
  return o;
}

}  // namespace

void write_json_if_asked(const CliArgs& a, const nlohmann::json& j) {
  if (CommandCapture* capture = active_capture()) {   // the Python package: the results, no file
    capture->results = j;
    return;
  }
  if (auto path = a.get_opt("json")) {
    write_json_atomic(*path, j);
    print_wrote(*path);
  }
}

const CommandFlags& command_flags(const std::string& command) {
  static const std::map<std::string, CommandFlags> flags = [] {
    std::map<std::string, CommandFlags> m;
    for (const FlagSpec& f : flag_table())
      for (const std::string& c : f.commands)
        (f.kind == FlagKind::switch_ ? m[c].switches : m[c].valued).insert(f.name);
    return m;
  }();
  auto it = flags.find(command);
  OOMLAB_CHECK(it != flags.end() && command != "run" && command != "step" && command != "amp-policy",
               "unknown command '", command, "' (train, summary, estimate, trick or allreduce-bench)");
  return it->second;
}

int cmd_models(const std::vector<std::string>& args) {
  if (print_help_if_asked("models", args)) return 0;
  CliArgs a(args, "models");   // takes nothing: a stray word or flag is an error
  for (const auto& m : model_names()) cli_printf("%s\n", m.c_str());
  return 0;
}

int cmd_amp_policy(const std::vector<std::string>& args) {
  if (print_help_if_asked("amp-policy", args)) return 0;
  CliArgs a(args, "amp-policy");
  check_output_paths(a);
  cli_printf("%-20s %-13s %s\n", "op", "policy", "what it does under --amp fp16|bf16");
  nlohmann::json rows = nlohmann::json::array();
  for (const AutocastRule& r : autocast_rules()) {
    cli_printf("%-20s %-13s %s\n", r.op, cast_policy_name(r.policy), r.why);
    rows.push_back({{"op", r.op}, {"policy", cast_policy_name(r.policy)}, {"why", r.why}});
  }
  std::puts("other ops (relu, gelu, dropout, pooling, upsample, embedding, views) run in their input's dtype; "
            "float64 is never lowered;\nparameters, gradients and optimizer state stay float32 (master weights)");
  write_json_if_asked(
      a, make_results("amp-policy", cpu_device(), nlohmann::json::object(), {{"rules", rows}}, "nothing: no run"));
  return 0;
}

int cmd_summary(const std::vector<std::string>& args) {
  if (print_help_if_asked("summary", args)) return 0;
  CliArgs a(args, "summary");
  const RunSpec spec = model_spec(a);
  check_output_paths(a);
  ModelSummary s = summarize_model(spec, spec.batch);
  cli_printf("%-28s %-18s %-18s %12s %12s %-16s %14s %14s\n", "layer", "type", "output", "values/img",
              "params", "compute dtype", "output bytes", "saved bytes");
  for (const LayerRow& r : s.layers)
    cli_printf("%-28s %-18s %-18s %12lld %12lld %-16s %14s %14s\n", r.name.c_str(), r.type.c_str(),
                shape_str(r.output_shape).c_str(), (long long)r.output_values, (long long)r.params,
                r.compute_dtype.c_str(), format_bytes(double(r.output_bytes)).c_str(),
                format_bytes(double(r.saved_bytes)).c_str());
  cli_printf("total params %lld; activation values per sample %lld (%s fp32); saved for backward %s "
              "(batch %lld); forward-only peak %s; training-forward peak %s\n",
              (long long)s.params, (long long)s.activation_values_per_sample,
              format_bytes(4.0 * double(s.activation_values_per_sample)).c_str(),
              format_bytes(double(s.saved_bytes)).c_str(), (long long)s.batch,
              format_bytes(double(s.forward_only_peak_bytes)).c_str(),
              format_bytes(double(s.training_forward_peak_bytes)).c_str());
  if (s.nonleaf_saved_bytes > 0)
    cli_printf("saved for backward by code in non-leaf modules (not in the rows above): %s\n",
                format_bytes(double(s.nonleaf_saved_bytes)).c_str());
  if (!s.transformer_layers.empty()) {
    cli_printf("\n%-28s %14s %18s %18s %8s\n", "transformer layer", "saved (ours)", "Korthikanti fp16",
                "Korthikanti fp32", "ours/fp32");
    for (const TransformerLayerRow& t : s.transformer_layers)
      cli_printf("%-28s %14s %18s %18s %8.3f\n", t.name.c_str(), format_bytes(double(t.saved_bytes)).c_str(),
                  format_bytes(double(t.korthikanti_fp16_bytes)).c_str(),
                  format_bytes(double(t.korthikanti_fp32_bytes)).c_str(),
                  double(t.saved_bytes) / double(std::max<int64_t>(1, t.korthikanti_fp32_bytes)));
  }
  nlohmann::json cfg = {{"model", spec.model},
                        {"input", s.input},
                        {"batch", s.batch},
                        {"checkpoint", spec.checkpoint.spec},
                        {"amp", spec.amp_text()}};
  cfg.update(spec.arch.to_json(spec.model));
  write_json_if_asked(a, make_results("summary", meta_device(), cfg, s.to_json(),
                                         "the training forward (metrics.totals.training_forward_peak_bytes)"));
  return 0;
}

namespace {
// estimate --gpu NAME: the step's time features on that card and, with the source tree's
// calibration (time_model.h), the predicted step time.
nlohmann::json estimate_time_on_gpu(const CliArgs& a, const RunSpec& spec, const MemoryEstimate& e) {
  const GpuSpec& g = find_gpu(a.get("gpu"));
  const std::string allow_tf32 = a.get_opt("allow-tf32").value_or("cudnn");
  const TimeFeatures f = time_features(e, g, parse_tf32_use(allow_tf32));
  nlohmann::json t = {{"gpu", g.name}, {"allow_tf32", allow_tf32}, {"features_ms", f}};
  if (!e.dp_devices.empty()) {   // DataParallel's copies, beside the step (not in it)
    DpCopyBytes b{e.params_bytes + e.buffers_bytes, e.grads_bytes, e.input_bytes, {}};
    for (const DpDeviceEstimate& d : e.dp_devices) b.chunks.push_back(d.chunk);
    const CommTime c = dp_comm_time(b, g);
    t["communication"] = c.to_json();
    cli_printf("  DataParallel copies over %lld devices on %s: %.2f ms (lower bound)\n", (long long)spec.devices,
                c.link.c_str(), c.total_ms);
  }
  if (spec.parallel == ParallelMode::ddp) {   // the all-reduce, beside the step (not in it)
    const CommTime c = ddp_comm_time(e.ddp_bucket_bytes, int(spec.devices), g, spec.zero_stage);
    t["communication"] = c.to_json();
    cli_printf("  DDP all-reduce over %lld ranks on %s: %.2f ms (lower bound; last bucket %.2f ms)\n",
                (long long)spec.devices, c.link.c_str(), c.total_ms, c.last_bucket_ms);
  }
  const TimeModel* m = default_time_model();
  if (!m) {
    cli_printf("  step time on %s: no time model (reports/plan_calibration.json is not beside this build)\n",
                g.name.c_str());
    return t;
  }
  const double ms = m->predict_ms(f);
  t["predicted_ms"] = ms;
  t["unseen_features"] = m->unseen(f);
  t["calibration"] = m->source;
  cli_printf("  %s on %s: %.1f ms predicted (time model fitted on the GPU records: %s)\n",
              e.dp_devices.empty() ? "step time" : "device 0's work (no straggler, no copies: oomlab plan adds them)",
              g.name.c_str(), ms, m->source.c_str());
  return t;
}
}  // namespace

namespace {
// The estimate's table: each component, exact (meta) beside the source's formula.
void print_estimate(const RunSpec& spec, const MemoryEstimate& e) {
  auto row = [](const char* what, int64_t exact, const char* formula_what, int64_t formula) {
    cli_printf("  %-22s %14s   %-30s %14s\n", what, format_bytes(double(exact)).c_str(), formula_what,
                formula < 0 ? "" : format_bytes(double(formula)).c_str());
  };
  cli_printf("%s, batch %lld, %s: %lld params, %lld output values per sample\n", e.model.c_str(),
              (long long)e.batch, e.optimizer.c_str(), (long long)e.params, (long long)e.outputs_per_sample);
  cli_printf("  %-22s %14s   %-30s %14s\n", "component (exact, meta)", "bytes", "source formula", "bytes");
  row("params", e.params_bytes, "params x n (n=2 SGD, 4 Adam)", e.formula_params_bytes);
  row("buffers (BN stats)", e.buffers_bytes, "-", -1);
  row("grads", e.grads_bytes, "(inside params x n)", -1);
  row("optimizer state", e.optimizer_state_bytes, "(inside params x n)", -1);
  if (spec.master_weights && e.zero_stage == 0) row("master weights (fp32)", e.master_weights_bytes, "-", -1);
  if (!e.ddp_bucket_bytes.empty() && e.zero_stage == 0)
    row(str_cat("DDP buckets (", e.ddp_bucket_bytes.size(), ")").c_str(), e.ddp_buckets_total_bytes(), "-", -1);
  if (e.zero_stage > 0) row(str_cat("ZeRO-", e.zero_stage, " shards").c_str(), e.zero_shard_bytes, "-", -1);
  if (spec.offload != ZeroOffload::none) row("on the host (offload)", e.offload_host_bytes, "-", -1);
  row("input batch", e.input_bytes, "input batch", e.formula_input_bytes);
  row("activations (saved)", e.activation_bytes, "batch x outputs x 2", e.formula_activation_bytes);
  row("transient over fwd", e.transient_bytes, "-", -1);
  if (e.zero_stage > 0) row("model states", e.model_state_bytes, "-", -1);
  row("PEAK allocated", e.peak_allocated_bytes, "TOTAL", e.formula_bytes);
  row("peak reserved", e.peak_reserved_bytes, "-", -1);
  if (spec.cuda_graphs) {
    row("graph: capture peak", e.graph_capture_peak_bytes, "-", -1);
    row("graph: private pool", e.graph_pool_bytes, "-", -1);
    row("graph: peak reserved", e.graph_reserved_peak_bytes, "-", -1);
  }
  for (const DpDeviceEstimate& d : e.dp_devices)
    cli_printf("  %-8s %5lld samples: peak allocated %s, reserved %s\n", d.device.c_str(), (long long)d.chunk,
                format_bytes(double(d.peak_allocated_bytes)).c_str(),
                format_bytes(double(d.peak_reserved_bytes)).c_str());
  cli_printf("  formula error: %+.1f%%\n", e.formula_error_pct);
  for (const auto& [dtype, flops] : e.step_flops)
    cli_printf("  matrix work per step (%s): %.3f TFLOP\n", dtype.c_str(), flops / 1e12);
}
}  // namespace

int cmd_estimate(const std::vector<std::string>& args) {
  if (print_help_if_asked("estimate", args)) return 0;
  CliArgs a(args, "estimate");
  RunSpec spec = model_spec(a);
  const std::string opt = spec.optimizer.value_or("sgd");
  const uint64_t cap = spec.device_memory;
  check_output_paths(a);
  const bool record = a.has("memory-snapshot") || a.has("chrome-trace");
  nlohmann::json budget;
  if (spec.checkpoint.kind == CheckpointPolicy::Kind::budget) {
    const CheckpointBudgetChoice ch = choose_checkpoint_budget(spec, spec.batch, opt, spec.checkpoint.budget_bytes);
    cli_printf("--checkpoint %s: %s (exact meta peak %s; tried %zu plans)\n", spec.checkpoint.spec.c_str(),
                ch.policy.spec.c_str(), format_bytes(double(ch.predicted_peak_bytes)).c_str(), ch.tried.size());
    budget = ch.to_json();
    spec.checkpoint = ch.policy;
  }
  MemoryEstimate e =
      with_traces_on_oom(a, meta_device(), [&] { return estimate_memory(spec, spec.batch, opt, cap, record,
                                                                        a.has("by-module")); });
  print_estimate(spec, e);
  if (e.by_module) cli_printf("%s", e.by_module->table(15).c_str());
  nlohmann::json metrics = e.to_json();
  if (a.has("gpu")) metrics["time_model"] = estimate_time_on_gpu(a, spec, e);
  if (cap > 0 && !e.dp_devices.empty()) {
    cli_printf("  largest batch: not searched under DataParallel (oomlab plan --gpus N searches it)\n");
  } else if (cap > 0) {   // what batch fits the card (exact meta steps under the cap)
    const LargestBatch lb = largest_batch_under(spec, opt, cap);
    cli_printf("  largest batch under %s: %s%lld (%lld exact meta steps)\n", format_bytes(double(cap)).c_str(),
                lb.at_search_cap ? ">= " : "", (long long)lb.batch, (long long)lb.probes);
    metrics["largest_batch"] = lb.to_json();
  }
  nlohmann::json cfg = {{"model", spec.model},
                        {"batch", e.batch},
                        {"optimizer", opt},
                        {"momentum", opt == "sgd" ? spec.momentum.value_or(0.9) : 0.0},
                        {"device_memory", cap},
                        {"checkpoint", spec.checkpoint.spec},
                        {"amp", spec.amp_text()},
                        {"half", spec.half},
                        {"master_weights", spec.master_weights},
                        {"loss_scale", spec.loss_scale.str()},
                        {"cuda_graphs", spec.cuda_graphs},
                        {"channels_last", spec.channels_last},
                        {"parallel", parallel_mode_name(spec.parallel)}};
  if (spec.parallel == ParallelMode::ddp)
    cfg.update({{"devices", spec.devices}, {"bucket_cap", spec.bucket_cap}, {"zero", spec.zero_stage},
                {"offload", zero_offload_name(spec.offload)}});
  if (!e.dp_devices.empty()) cfg["devices"] = spec.devices;
  if (spec.parallel == ParallelMode::bdp) cfg["gpu0_bsz"] = spec.gpu0_bsz;
  if (!budget.is_null()) cfg["checkpoint_budget"] = budget;
  cfg.update(spec.arch.to_json(spec.model));
  write_outputs_if_asked(a, meta_device(), make_results("estimate", meta_device(), cfg, metrics,
                                                       "the steady-state training step (metrics.exact)"));
  return 0;
}

int cmd_train(const std::vector<std::string>& args) {
  if (print_help_if_asked("train", args)) return 0;
  CliArgs a(args, "train");
  RunSpec c = train_spec(a);
  check_train_config(c);
  check_output_paths(a);
  if (std::optional<int> job = self_launch_ddp(c, args)) return *job;   // ddp processes without a launcher
  c.record_history = a.has("memory-snapshot") || a.has("chrome-trace");
  set_backend_options(backend_options(a));
  nlohmann::json results = with_traces_on_oom(a, c.device, [&] { return train(c); });
  // DDP under a launcher: every rank trains, rank 0 writes.
  if (results["metrics"].contains("ddp") && results["metrics"]["ddp"].value("rank", 0) != 0) return 0;
  write_outputs_if_asked(a, c.device, results);
  if (results.contains("metrics") && results["metrics"].contains("diverged_at_step")) {
    std::fprintf(stderr, "oomlab: diverged: the loss became %s at step %lld (exit %d)\n",
                 results["metrics"].value("diverged_loss", "NaN").c_str(),
                 (long long)results["metrics"]["diverged_at_step"].get<int64_t>(), kExitDiverged);
    return kExitDiverged;
  }
  return 0;
}

void check_command_args(const std::string& command, const std::vector<std::string>& args) {
  command_flags(command);   // a known measuring command
  if (command == "allreduce-bench") {
    check_allreduce_bench_args(args);
    return;
  }
  CliArgs a(args, command);   // trick: its flags are all the table's
  if (command == "train") {
    check_train_config(train_spec(a));
    backend_options(a);
  } else if (command == "plan") {
    plan_spec(a);
  } else if (command != "trick") {
    model_spec(a);
  }
  check_output_paths(a);
}

}  // namespace oomlab
