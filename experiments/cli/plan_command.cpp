// plan_command.cpp — `oomlab plan`'s flags and console output (the search: planner.h).
// --gpu NAME takes the card's memory and peaks from the GPU table; --device-memory SIZE
// plans for a card of that capacity whose peaks are unknown: every precision is searched,
// nothing is ranked by time (no recommendation). Times come from the source tree's
// calibration (time_model.h) when it is there, else the compute bound ranks (and says so).
// --json writes the whole search, with the calibration's summary.
#include <algorithm>
#include <cstdio>

#include "engine/core/backend.h"
#include "engine/core/byte_sizes.h"
#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/file_kinds.h"
#include "engine/train/results.h"
#include "experiments/cli/cli_args.h"
#include "experiments/cli/cli_output.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/flag_table.h"
#include "experiments/cli/run_spec_flags.h"
#include "experiments/plan/comm_time.h"
#include "experiments/plan/planner.h"
#include "experiments/train/train_command.h"

namespace oomlab {
namespace {
PlanRequest plan_request(const CliArgs& a) {
  OOMLAB_CHECK(a.has("gpu") || a.has("device-memory"), "oomlab plan needs --gpu NAME or --device-memory SIZE");
  PlanRequest r;
  r.model = plan_spec(a);
  if (a.has("gpu")) {
    r.gpu = find_gpu(a.get("gpu"));
  } else {   // a card of this size, peaks unknown: -1 keeps every precision in the search
    r.gpu.name = "custom";
    r.gpu.model = "a card of " + a.get("device-memory");
    r.gpu.memory_bytes = parse_size(a.get("device-memory"));
    r.gpu.tf32_tflops = r.gpu.bf16_tflops = r.gpu.fp16_tflops = -1;
    r.gpu.source = "--device-memory";
  }
  r.reserve_bytes = parse_size(a.get("reserve"));
  r.gpus = int(a.get_int("gpus"));
  OOMLAB_CHECK(a.has("global-batch") != a.has("batch"),
               "oomlab plan needs one of --global-batch B (accumulation searched) or --batch B (per card, none)");
  r.accumulate = a.has("global-batch");
  r.global_batch = r.accumulate ? a.get_int("global-batch") : a.get_int("batch") * r.gpus;
  r.optimizer = r.model.optimizer.value_or("adamw");
  r.time_model = default_time_model();
  return r;
}

std::string ms_cell(bool shown, double ms) { return shown && ms > 0 ? str_cat(int64_t(ms * 10 + 0.5) / 10.0) : "-"; }

void print_candidates(const Plan& p) {
  cli_printf("  %-44s %6s %6s %11s %10s %10s  %s\n", "techniques", "micro", "accum", "peak", "time (ms)",
              "bound (ms)", "");
  for (size_t i = 0; i < p.candidates.size(); ++i) {
    const PlanCandidate& c = p.candidates[i];
    const bool best = p.recommended && *p.recommended == i;
    const bool front = std::find(p.frontier.begin(), p.frontier.end(), i) != p.frontier.end();
    const bool fits = c.micro_batch > 0;
    const std::string note = !c.why_not.empty() ? c.why_not : !c.unseen.empty() ? "extrapolated: " + c.unseen.front()
                                                                                : "";
    cli_printf("  %-44s %6lld %6lld %11s %10s %10s  %s\n", c.techniques().c_str(), (long long)c.micro_batch,
                (long long)c.accumulate,
                c.peak_reserved_bytes < 0 ? "-" : format_bytes(double(c.peak_reserved_bytes)).c_str(),
                ms_cell(fits, c.predicted_ms).c_str(), ms_cell(fits, c.compute_bound_ms).c_str(),
                best ? "<- recommended" : front ? str_cat("frontier ", note).c_str() : note.c_str());
  }
}

void print_plan(const PlanRequest& r, const Plan& p) {
  cli_printf("%s on %s%s (%s, %s kept free), global batch %lld%s: %zu candidates, %lld exact meta steps, "
              "%lld ruled out by their static bytes\n",
              r.model.model.c_str(), r.gpus > 1 ? str_cat(r.gpus, " x ").c_str() : "", r.gpu.name.c_str(),
              format_bytes(double(r.gpu.memory_bytes)).c_str(), format_bytes(double(r.reserve_bytes)).c_str(),
              (long long)r.global_batch, r.accumulate ? "" : " (no accumulation)", p.candidates.size(),
              (long long)p.meta_steps, (long long)p.pruned);
  print_candidates(p);
  if (r.gpus > 1)
    cli_printf("communication: DDP's all-reduce, or DataParallel's copies to and from device 0 every "
                "micro-step, over %s, added whole to each time (no overlap; a lower bound of its own: no "
                "multi-GPU record)\n",
                ddp_comm_time({}, r.gpus, r.gpu).link.c_str());
  if (r.gpus > 1 && !searches_data_parallel(r.gpus))
    cli_printf("DataParallel: not searched past %d cards (one process drives one machine's cards)\n",
                kDataParallelMaxGpus);
  if (r.time_model)
    cli_printf("time: the time model fitted on the GPU records (%s); bound: matrix FLOPs over the dense peak\n",
                r.time_model->source.c_str());
  else
    cli_printf("time: no calibration beside this build; ranked by the bound (matrix FLOPs over the dense peak)\n");
  if (p.recommended) {
    const PlanCandidate& c = p.candidates[*p.recommended];
    cli_printf("recommended: oomlab train %s\n  in PyTorch: %s\n", train_flags(r, c).c_str(),
                pytorch_settings(r, c).c_str());
    if (!c.unseen.empty())
      cli_printf("  note: the calibration never saw %zu of its terms (the first: %s): its time omits them\n",
                  c.unseen.size(), c.unseen.front().c_str());
    for (const std::string& why : p.technique_reasons) cli_printf("  not chosen: %s\n", why.c_str());
  } else if (!p.frontier.empty()) {
    cli_printf("the card's peaks are unknown (--device-memory): give --gpu NAME to rank the fitting ones\n");
  }
}

// --verify's device, checked before the search: cpu or cuda[:N], and a GPU that answers.
void check_verify_device(const std::string& text) {
  const Device d = parse_device(text);
  OOMLAB_CHECK(!d.is_meta(), "--verify meta would measure nothing: give cpu or cuda[:N]");
  if (d.type != DeviceType::cuda) return;
  const BackendHooks hooks = backend_hooks(DeviceType::cuda);
  OOMLAB_CHECK_T(DeviceError, hooks.physical != nullptr, "--verify ", text, ": this oomlab was built without CUDA");
  try {
    hooks.physical(d.index);
  } catch (const Error& e) {
    throw DeviceError(str_cat("--verify ", text, ": no GPU here: ", e.what()));
  }
}

// --verify DEVICE: the recommendation trained for a few steps on DEVICE (synthetic data),
// its median steady step time beside the prediction (which is for --gpu's card) and its
// peak reserved beside the meta step's.
nlohmann::json verify_recommendation(const PlanRequest& r, const PlanCandidate& c, const std::string& device) {
  RunSpec s = candidate_train_spec(r, c);
  s.device = parse_device(device);
  s.steps = 6;   // the first is dropped from the timing (allocator warm-up)
  s.synthetic_size = std::max<int64_t>(64, s.batch * s.accumulate);
  s.eval_batches = 1;
  s.quiet = true;
  check_train_config(s);
  const Tf32Use tf32 = parse_tf32_use(candidate_allow_tf32(r, c));
  set_backend_options(BackendOptions{tf32.matmul, tf32.conv, std::nullopt, std::nullopt, std::nullopt});
  const nlohmann::json res = train(s);
  const double ms = res["metrics"]["step_time_s"]["median"].get<double>() * 1e3;
  // several devices: the fullest (DDP records rank 0's, which holds as much as any)
  const nlohmann::json& mem = res["memory"];
  int64_t peak = r.gpus > 1 ? 0 : mem["totals"]["reserved_bytes.all.peak"].get<int64_t>();
  if (r.gpus > 1)
    for (const auto& [name, stats] : mem["devices"].items())
      peak = std::max(peak, stats["reserved_bytes.all.peak"].get<int64_t>());
  cli_printf("verify on %s: step %.1f ms measured, %.1f ms predicted for %s; peak reserved %s measured, %s "
              "predicted (meta)\n", device.c_str(), ms, c.predicted_ms, r.gpu.name.c_str(),
              format_bytes(double(peak)).c_str(), format_bytes(double(c.peak_reserved_bytes)).c_str());
  return {{"device", device}, {"steps", s.steps}, {"measured_ms", ms}, {"predicted_ms", c.predicted_ms},
          {"predicted_for", r.gpu.name}, {"measured_peak_reserved_bytes", peak},
          {"predicted_peak_reserved_bytes", c.peak_reserved_bytes}};
}

nlohmann::json plan_json(const PlanRequest& r, const Plan& p) {
  nlohmann::json cands = nlohmann::json::array();
  for (const PlanCandidate& c : p.candidates) cands.push_back(c.to_json());
  nlohmann::json m = {{"candidates", cands}, {"frontier", p.frontier}, {"meta_steps", p.meta_steps},
                      {"pruned", p.pruned},
                      {"smallest_peak_bytes", p.smallest_peak_bytes}, {"params", p.params},
                      {"technique_reasons", p.technique_reasons}};
  if (r.time_model)
    m["time_model"] = {{"calibration", r.time_model->source}, {"coefficients", r.time_model->coefficients},
                       {"summary", r.time_model->summary}};
  else
    m["time_model"] = {{"calibration", nullptr}, {"ranked_by", "compute_bound_ms"}};
  if (p.recommended) {
    const PlanCandidate& c = p.candidates[*p.recommended];
    m["recommended"] = {{"candidate", *p.recommended}, {"train_flags", train_flags(r, c)},
                        {"pytorch", pytorch_settings(r, c)}};
  }
  const nlohmann::json gpu = {{"name", r.gpu.name},         {"model", r.gpu.model},
                              {"memory_bytes", r.gpu.memory_bytes}, {"measured_memory", r.gpu.measured},
                              {"fp32_tflops", r.gpu.fp32_tflops},   {"tf32_tflops", r.gpu.tf32_tflops},
                              {"bf16_tflops", r.gpu.bf16_tflops},   {"fp16_tflops", r.gpu.fp16_tflops},
                              {"bandwidth_gbps", r.gpu.bandwidth_gbps}, {"source", r.gpu.source},
                              {"link_gbps", r.gpu.link_gbps}, {"link", r.gpu.link}};
  const nlohmann::json config = {{"model", r.model.model}, {"gpu", gpu}, {"gpus", r.gpus},
                                 {"global_batch", r.global_batch}, {"accumulation_searched", r.accumulate},
                                 {"data_parallel_searched", searches_data_parallel(r.gpus)},
                                 {"seq_len", r.model.seq_len},
                                 {"optimizer", r.optimizer}, {"reserve_bytes", r.reserve_bytes}};
  return make_results("plan", meta_device(), config, m, "the last candidate's meta step");
}
}  // namespace

int cmd_plan(const std::vector<std::string>& args) {
  if (print_help_if_asked("plan", args)) return 0;
  CliArgs a(args, "plan");
  const PlanRequest r = plan_request(a);
  if (a.has("json")) check_output_file(a.get("json"), "--json");
  if (a.has("verify")) check_verify_device(a.get("verify"));
  const Plan p = make_plan(r, cli_progress);
  print_plan(r, p);
  if (p.frontier.empty()) {   // nothing fits: say what would (one error line, exit 2, no JSON)
    std::string cards;
    for (const std::string& g : cards_that_hold(p.smallest_peak_bytes, r.reserve_bytes))
      cards += (cards.empty() ? "" : ", ") + g;
    throw ValueError(str_cat("nothing fits ", r.gpu.name, ": the smallest candidate needs ",
                             format_bytes(double(p.smallest_peak_bytes)), " at micro-batch ",
                             r.accumulate ? 1 : r.global_batch / r.gpus, " plus the ",
                             format_bytes(double(r.reserve_bytes)), " reserve; cards that hold it: ",
                             cards.empty() ? "none in the table" : cards));
  }
  nlohmann::json j = plan_json(r, p);
  if (a.has("verify") && p.recommended)
    j["metrics"]["verify"] = verify_recommendation(r, p.candidates[*p.recommended], a.get("verify"));
  write_json_if_asked(a, j);
  return 0;
}

}  // namespace oomlab
