// planner.cpp — the search of `oomlab plan` (planner.h).
#include "experiments/plan/planner.h"

#include <algorithm>
#include <cstdio>

#include "engine/core/byte_sizes.h"
#include "engine/core/dispatch.h"
#include "engine/core/error.h"
#include "experiments/plan/memory_report.h"
#include "experiments/plan/plan_fit.h"
#include "models/model_table.h"

namespace oomlab {
namespace {

std::vector<std::string> checkpoint_policies(const ModelEntry& m) {
  std::vector<std::string> out = {"none"};
  if (m.family == "bert") out.push_back("selective");
  out.push_back("sqrt");
  out.push_back("all");
  return out;
}

std::vector<Choice> choices(const ModelEntry& m, int gpus) {
  const std::vector<std::string> attention =
      m.has_use("attention") ? std::vector<std::string>{"eager", "fused"} : std::vector<std::string>{""};
  const bool layouts = m.has_technique("channels-last") && m.input == InputKind::image && !m.is_graph();
  std::vector<Choice> out;
  // several GPUs: DDP (ZeRO stages 0-3 for the zoo's models) and DataParallel; balanced
  // DataParallel is searched after the others (fit_balanced_dp)
  std::vector<std::pair<ParallelMode, int>> modes = {{ParallelMode::none, 0}};
  if (gpus > 1) modes = {{ParallelMode::ddp, 0}};
  if (gpus > 1 && !m.is_graph()) modes = {{ParallelMode::ddp, 0}, {ParallelMode::ddp, 1}, {ParallelMode::ddp, 2},
                                          {ParallelMode::ddp, 3}};
  if (searches_data_parallel(gpus)) modes.push_back({ParallelMode::dp, 0});
  for (const std::string& a : attention)
    for (bool cl : layouts ? std::vector<bool>{false, true} : std::vector<bool>{false})
      for (bool fuse : m.has_use("fuse-relu") ? std::vector<bool>{false, true} : std::vector<bool>{false})
        for (const auto& [mode, z] : modes) out.push_back({a, cl, fuse, z, mode});
  return out;
}

// ZeRO-Offload, searched when nothing else fits (its host step has no record to time it by):
// stage 2 with the optimizer offloaded, stage 3 with it and with the parameters too; over
// the ranks, or one GPU (a world of one, ZeRO-Offload's single-GPU case). Stage 3 refuses
// channels-last, so the layout stays as it is.
std::vector<Choice> offload_choices(const ModelEntry& m) {
  std::vector<Choice> out;
  for (const Choice& base : choices(m, 1)) {
    if (base.channels_last) continue;
    for (const auto& [z, o] : std::vector<std::pair<int, ZeroOffload>>{
             {2, ZeroOffload::optimizer}, {3, ZeroOffload::optimizer}, {3, ZeroOffload::params}}) {
      Choice c = base;
      c.zero = z;
      c.parallel = ParallelMode::ddp;
      c.offload = o;
      out.push_back(c);
    }
  }
  return out;
}

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", ms);
  return buf;
}

// The recommendation: the least time, then the smallest peak, among fitting candidates
// whose every term the calibration measured, communication aside (when any fits; else among
// all that fit).
// The terms of a candidate's time the calibration never saw, communication aside (no
// candidate with several GPUs has it measured); measured: none.
std::vector<std::string> uncalibrated(const PlanCandidate& c) {
  std::vector<std::string> out;
  for (const std::string& u : c.unseen)
    if (u.rfind("communication", 0) != 0) out.push_back(u);
  return out;
}

bool measured(const PlanCandidate& c) { return uncalibrated(c).empty(); }

void recommend(Plan& plan) {
  bool any_measured = false;
  for (const PlanCandidate& c : plan.candidates) any_measured |= c.micro_batch > 0 && measured(c);
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const PlanCandidate& c = plan.candidates[i];
    if (c.micro_batch == 0 || c.time_ms() <= 0 || (any_measured && !measured(c))) continue;
    const PlanCandidate* r = plan.recommended ? &plan.candidates[*plan.recommended] : nullptr;
    if (!r || c.time_ms() < r->time_ms() ||
        (c.time_ms() == r->time_ms() && c.peak_reserved_bytes < r->peak_reserved_bytes))
      plan.recommended = i;
  }
}

void choose(Plan& plan) {
  for (size_t i = 0; i < plan.candidates.size(); ++i) {
    const PlanCandidate& c = plan.candidates[i];
    if (c.micro_batch == 0) continue;
    bool beaten = false;   // (with unknown peaks every time is 0: the frontier is the smallest peak)
    for (const PlanCandidate& o : plan.candidates)
      beaten |= o.micro_batch > 0 && o.time_ms() <= c.time_ms() && o.peak_reserved_bytes <= c.peak_reserved_bytes &&
                (o.time_ms() < c.time_ms() || o.peak_reserved_bytes < c.peak_reserved_bytes);
    if (!beaten) plan.frontier.push_back(i);
  }
  recommend(plan);
}

// One technique dimension: its name in the reasons, and whether two candidates differ in it.
struct Dimension {
  const char* name;
  std::string (*value)(const PlanCandidate&);
};
const Dimension kDimensions[] = {
    {"precision", [](const PlanCandidate& c) { return c.precision; }},
    {"checkpoint", [](const PlanCandidate& c) { return c.checkpoint; }},
    {"attention", [](const PlanCandidate& c) { return c.attention; }},
    {"channels-last", [](const PlanCandidate& c) { return std::string(c.channels_last ? "on" : "off"); }},
    {"fuse-relu", [](const PlanCandidate& c) { return std::string(c.fuse_relu ? "on" : "off"); }},
    {"parallel", [](const PlanCandidate& c) {
       return c.zero > 0 ? str_cat("zero-", c.zero, c.offload.empty() ? "" : "+offload-" + c.offload) : c.parallel;
     }},
};

// Why a candidate predicted faster than the recommendation lost: a term of its time the
// calibration never measured (recommend() takes only measured ones when any fits).
std::string faster_but_extrapolated(const PlanCandidate& c, const PlanCandidate& best) {
  const std::vector<std::string> terms = uncalibrated(c);
  if (c.time_ms() >= best.time_ms() || terms.empty()) return "";
  std::string why;
  for (const std::string& u : terms) why += (why.empty() ? "" : "; ") + u;
  return "; faster, but extrapolated: " + why;
}

void explain(Plan& plan) {
  if (!plan.recommended) return;
  const PlanCandidate& best = plan.candidates[*plan.recommended];
  for (const PlanCandidate& c : plan.candidates) {
    int differs = 0;
    const Dimension* dim = nullptr;
    for (const Dimension& d : kDimensions)
      if (d.value(c) != d.value(best)) ++differs, dim = &d;
    if (differs != 1) continue;
    const std::string what = str_cat(dim->name, " ", dim->value(c), ": ");
    if (c.micro_batch == 0)
      plan.technique_reasons.push_back(what + c.why_not);
    else
      plan.technique_reasons.push_back(str_cat(what, ms_text(c.time_ms()), " against ", ms_text(best.time_ms()),
                                               " (micro-batch ", c.micro_batch, ", peak ",
                                               format_bytes(double(c.peak_reserved_bytes)), ")",
                                               faster_but_extrapolated(c, best)));
  }
}
}  // namespace

std::string PlanCandidate::techniques() const {
  std::string s = precision;
  if (checkpoint != "none") s += ", checkpoint " + checkpoint;
  if (attention == "fused") s += ", fused attention";
  if (channels_last) s += ", channels-last";
  if (fuse_relu) s += ", fuse-relu";
  if (zero > 0) s += str_cat(", zero-", zero);
  if (!offload.empty()) s += ", offload " + offload;
  if (parallel == "dp") s += ", DataParallel";
  if (parallel == "bdp") s += gpu0_bsz >= 0 ? str_cat(", balanced DataParallel (device 0: ", gpu0_bsz, ")")
                                            : std::string(", balanced DataParallel");
  return s;
}

nlohmann::json PlanCandidate::to_json() const {
  return {{"precision", precision}, {"checkpoint", checkpoint}, {"attention", attention},
          {"channels_last", channels_last}, {"fuse_relu", fuse_relu}, {"zero", zero}, {"parallel", parallel},
          {"offload", offload}, {"offload_ms", offload_ms},
          {"gpu0_bsz", gpu0_bsz >= 0 ? nlohmann::json(gpu0_bsz) : nlohmann::json()},
          {"micro_batch", micro_batch}, {"accumulate", accumulate}, {"fits", micro_batch > 0},
          {"peak_reserved_bytes", peak_reserved_bytes}, {"step_flops", step_flops},
          {"compute_bound_ms", compute_bound_ms}, {"predicted_ms", predicted_ms}, {"comm_ms", comm_ms},
          {"unseen_features", unseen},
          {"why_not", why_not}};
}

namespace {
// The DataParallel candidate balanced DataParallel starts from: the fastest that fits, else
// the one with the smallest peak; nullptr when none had a meta step.
const PlanCandidate* balanced_dp_base(const Plan& plan) {
  const PlanCandidate* base = nullptr;
  for (const PlanCandidate& c : plan.candidates) {
    if (c.parallel != "dp" || c.peak_reserved_bytes < 0) continue;
    if (!base) {
      base = &c;
      continue;
    }
    const bool faster = c.micro_batch > 0 && (base->micro_batch == 0 || c.time_ms() < base->time_ms());
    const bool smaller =
        c.micro_batch == 0 && base->micro_batch == 0 && c.peak_reserved_bytes < base->peak_reserved_bytes;
    if (faster || smaller) base = &c;
  }
  return base;
}

void add_balanced_dp(const PlanRequest& r, Plan& plan, const std::function<void(const std::string&)>& progress) {
  const PlanCandidate* base = balanced_dp_base(plan);
  if (!base) return;
  const PlanCandidate from = *base;
  if (progress) progress(from.techniques() + " -> balanced DataParallel");
  try {
    plan.candidates.push_back(fit_balanced_dp(r, from, plan));
  } catch (const ValueError& e) {   // named, not fatal
    PlanCandidate c = from;
    c.parallel = "bdp";
    c.micro_batch = c.accumulate = 0;
    c.why_not = e.what();
    plan.candidates.push_back(c);
  }
}
}  // namespace

namespace {
// One precision x checkpoint policy x choice as a candidate: refused, pruned by its
// precision's static bytes, or fitted (fit_micro_batch).
PlanCandidate one_candidate(const PlanRequest& r, const Precision& p, const std::string& policy, const Choice& ch,
                            Plan& plan, const std::function<void(const std::string&)>& progress) {
  PlanCandidate c;
  c.precision = p.name;
  c.checkpoint = policy;
  c.attention = ch.attention;
  c.channels_last = ch.channels_last;
  c.fuse_relu = ch.fuse_relu;
  c.zero = ch.zero;
  if (ch.parallel != ParallelMode::none) c.parallel = parallel_mode_name(ch.parallel);
  if (ch.offload != ZeroOffload::none) c.offload = zero_offload_name(ch.offload);
  if (progress) progress(c.techniques());
  if (p.half && ch.parallel == ParallelMode::dp) {   // as train refuses it
    c.why_not = "--half with DataParallel is not supported (the replicas stay float32)";
    return c;
  }
  if (const auto it = plan.static_bytes.find(static_key(p.name, ch));   // a bound: no meta step
      it != plan.static_bytes.end() && uint64_t(it->second) > usable_bytes(r)) {
    c.why_not = str_cat("does not fit: weights, gradients and optimizer state alone take ",
                        format_bytes(double(it->second)), " (", p.name, ")");
    ++plan.pruned;
    return c;
  }
  try {
    const RunSpec s = candidate_spec(r, p, policy, ch);
    // every op needs a CUDA float16 kernel (known where this build has the CUDA backend)
    if (p.half && backend_linked("cuda")) check_half_servable(s, 1, r.optimizer, DeviceType::cuda);
    fit_micro_batch(r, s, p, c, plan);
  } catch (const ValueError& e) {   // a combination the model refuses (named, not fatal)
    c.why_not = e.what();
  } catch (const NotImplementedError& e) {
    c.why_not = e.what();
  }
  return c;
}

// No candidate got as far as a meta step: the model refuses the request itself (a sequence
// past its position table, a shape its layers cannot take). One ValueError naming why,
// instead of a plan whose every row says the same.
void check_some_candidate_ran(const PlanRequest& r, const Plan& plan) {
  if (plan.smallest_peak_bytes >= 0) return;
  std::vector<std::string> reasons;
  for (const PlanCandidate& c : plan.candidates)
    if (std::find(reasons.begin(), reasons.end(), c.why_not) == reasons.end()) reasons.push_back(c.why_not);
  std::string text = reasons.front();
  for (size_t i = 1; i < std::min<size_t>(reasons.size(), 3); ++i) text += "; " + reasons[i];
  if (reasons.size() > 3) text += str_cat(" (and ", reasons.size() - 3, " other reasons)");
  throw ValueError(str_cat("oomlab plan: no candidate can train ", r.model.model, " as asked: ", text));
}

void search(const PlanRequest& r, const ModelEntry& m, const std::vector<Choice>& chs, Plan& plan,
            const std::function<void(const std::string&)>& progress) {
  for (const Precision& p : precisions(r.gpu))
    for (const std::string& policy : checkpoint_policies(m))
      for (const Choice& ch : chs) plan.candidates.push_back(one_candidate(r, p, policy, ch, plan, progress));
}
}  // namespace

Plan make_plan(const PlanRequest& r, const std::function<void(const std::string&)>& progress) {
  OOMLAB_CHECK(r.gpus >= 1 && r.global_batch >= r.gpus && r.global_batch % r.gpus == 0, "--global-batch ",
               r.global_batch, " must be a multiple of --gpus ", r.gpus, " (each rank trains its share)");
  const ModelEntry m = model_entry(r.model.model);
  Plan plan;
  search(r, m, choices(m, r.gpus), plan, progress);
  bool fits = false;
  for (const PlanCandidate& c : plan.candidates) fits |= c.micro_batch > 0;
  if (!fits && !m.is_graph()) search(r, m, offload_choices(m), plan, progress);   // the host's memory too
  check_some_candidate_ran(r, plan);
  if (r.gpus > 1) add_balanced_dp(r, plan, progress);
  choose(plan);
  explain(plan);
  return plan;
}

std::string candidate_allow_tf32(const PlanRequest& r, const PlanCandidate& c) {
  return precision_named(r.gpu, c.precision).allow_tf32;
}

RunSpec candidate_train_spec(const PlanRequest& r, const PlanCandidate& c) {
  const ModelEntry m = model_entry(r.model.model);
  const Precision p = precision_named(r.gpu, c.precision);
  const ParallelMode mode = c.parallel.empty() ? ParallelMode::none : parse_parallel_mode(c.parallel);
  RunSpec s = candidate_spec(r, p, c.checkpoint, Choice{c.attention, c.channels_last, c.fuse_relu, c.zero, mode,
                                                        parse_zero_offload(c.offload)});
  s.dataset = m.input == InputKind::tokens ? "synthetic-seq"
              : m.task == TaskKind::segmentation ? "synthetic-seg" : "synthetic";
  if (m.input == InputKind::tokens && s.seq_len <= 0) s.seq_len = m.defaults.seq_len;
  if (s.num_classes <= 0) s.num_classes = m.defaults.num_classes > 0 ? m.defaults.num_classes : 10;
  const bool data_parallel = mode == ParallelMode::dp || mode == ParallelMode::bdp;
  s.batch = c.micro_batch * (data_parallel ? r.gpus : 1);   // DataParallel's --batch is split over the devices
  s.accumulate = c.accumulate;
  if (mode == ParallelMode::bdp) s.gpu0_bsz = c.gpu0_bsz * c.accumulate;   // train's: per optimizer step
  s.optimizer = r.optimizer;
  return s;
}

}  // namespace oomlab
