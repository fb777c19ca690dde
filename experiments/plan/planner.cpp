// planner.cpp — the search of `oomlab plan` (planner.h).
#include "experiments/plan/planner.h"

#include <algorithm>
#include <cstdio>

#include "engine/core/byte_sizes.h"
#include "engine/core/dispatch.h"
#include "engine/core/error.h"
#include "experiments/plan/comm_time.h"
#include "experiments/plan/memory_report.h"
#include "models/model_table.h"

namespace oomlab {
namespace {

struct Precision {
  const char* name;
  std::optional<DType> amp;
  const char* allow_tf32;   // the run's --allow-tf32
  bool half = false;        // model.half() with float32 master weights (--half --master-weights)
};

std::vector<Precision> precisions(const GpuSpec& g) {
  std::vector<Precision> out = {{"fp32", std::nullopt, "none"}};
  if (g.tf32_tflops != 0) out.push_back({"tf32", std::nullopt, "all"});   // < 0: unknown, searched
  if (g.bf16_tflops != 0) out.push_back({"bf16", DType::bf16, "cudnn"});
  if (g.fp16_tflops != 0) out.push_back({"fp16", DType::f16, "cudnn"});
  if (g.fp16_tflops != 0) out.push_back({"half", std::nullopt, "cudnn", true});
  return out;
}

std::vector<std::string> checkpoint_policies(const ModelEntry& m) {
  std::vector<std::string> out = {"none"};
  if (m.family == "bert") out.push_back("selective");
  out.push_back("sqrt");
  out.push_back("all");
  return out;
}

// The technique choices one candidate makes besides precision and checkpointing.
struct Choice {
  std::string attention;   // "" when the model has no attention use
  bool channels_last = false, fuse_relu = false;
  int zero = 0;            // ZeRO stage (several GPUs)
};

std::vector<Choice> choices(const ModelEntry& m, int gpus) {
  const std::vector<std::string> attention =
      m.has_use("attention") ? std::vector<std::string>{"eager", "fused"} : std::vector<std::string>{""};
  const bool layouts = m.has_technique("channels-last") && m.input == InputKind::image && !m.is_graph();
  std::vector<Choice> out;
  const std::vector<int> stages = gpus > 1 && !m.is_graph() ? std::vector<int>{0, 1, 2, 3} : std::vector<int>{0};
  for (const std::string& a : attention)
    for (bool cl : layouts ? std::vector<bool>{false, true} : std::vector<bool>{false})
      for (bool fuse : m.has_use("fuse-relu") ? std::vector<bool>{false, true} : std::vector<bool>{false})
        for (int z : stages) out.push_back({a, cl, fuse, z});
  return out;
}

uint64_t usable_bytes(const PlanRequest& r) {
  return r.gpu.memory_bytes > r.reserve_bytes ? r.gpu.memory_bytes - r.reserve_bytes : 0;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i * i <= n; ++i)
    if (n % i == 0) {
      d.push_back(i);
      if (i != n / i) d.push_back(n / i);
    }
  std::sort(d.begin(), d.end());
  return d;
}

RunSpec candidate_spec(const PlanRequest& r, const Precision& p, const std::string& policy, const Choice& ch) {
  RunSpec s = r.model;
  s.amp = p.amp;
  s.half = s.master_weights = p.half;
  const bool scaled = p.amp == DType::f16 || p.half;   // fp16 gradients: dynamic loss scaling
  s.loss_scale = parse_loss_scale(scaled ? "dynamic" : "none", scaled);
  s.checkpoint = parse_checkpoint_policy(policy);
  s.arch.attention = ch.attention;
  s.channels_last = ch.channels_last;
  if (ch.fuse_relu) s.arch.fuse_relu = "on";
  if (r.gpus > 1) {   // one DDP rank: its gradient buckets count (ddp_on_meta.h)
    s.parallel = ParallelMode::ddp;
    s.devices = r.gpus;
    s.zero_stage = ch.zero;
  }
  return s;
}

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms", ms);
  return buf;
}

double bound_ms(const MemoryEstimate& e, const GpuSpec& g, bool tf32, int64_t accumulate) {
  double s = 0;
  for (const auto& [dtype, flops] : e.step_flops) {
    const double peak = g.peak_tflops(parse_dtype(dtype), tf32);
    if (peak > 0) s += flops / (peak * 1e12);
  }
  return s * 1e3 * double(accumulate);
}

// Fills c's times from the meta step `e` at its micro-batch; with DDP the all-reduce of the
// synchronised micro-step: whole in the prediction (no overlap), its last bucket in the bound.
void time_candidate(const PlanRequest& r, const Precision& p, const MemoryEstimate& e, PlanCandidate& c) {
  for (const auto& [dtype, flops] : e.step_flops) c.step_flops += flops * double(c.accumulate);
  const CommTime comm = ddp_comm_time(e.ddp_bucket_bytes, r.gpus, r.gpu, c.zero);
  c.comm_ms = comm.total_ms;
  c.compute_bound_ms = bound_ms(e, r.gpu, std::string(p.allow_tf32) == "all", c.accumulate) +
                       std::max(0.0, comm.last_bucket_ms);
  if (!r.time_model || r.gpu.bandwidth_gbps <= 0) return;
  const TimeFeatures f = time_features(e, r.gpu, parse_tf32_use(p.allow_tf32));
  c.predicted_ms = r.time_model->predict_ms(f) * double(c.accumulate) + std::max(0.0, comm.total_ms);
  c.unseen = r.time_model->unseen(f);
  if (r.gpus > 1)
    c.unseen.push_back(comm.total_ms < 0 ? "communication (the card's link is not in the table)"
                                         : "communication (no multi-GPU record: the link's datasheet rate)");
  const std::vector<std::string>& ran = r.time_model->precisions;
  if (std::find(ran.begin(), ran.end(), c.precision) == ran.end())
    c.unseen.push_back(str_cat("precision ", c.precision, " (no calibration pair ran it)"));
}

// What a step of precision p holds before any activation: weights, buffers, gradients,
// optimizer state, master weights and DDP buckets (the same for every candidate of p).
int64_t static_bytes(const MemoryEstimate& e) {
  return e.params_bytes + e.buffers_bytes + e.grads_bytes + e.optimizer_state_bytes + e.master_weights_bytes +
         e.zero_shard_bytes + (e.zero_stage == 0 ? e.ddp_buckets_total_bytes() : 0);   // ZeRO's: while reduced
}

// The largest divisor of the per-rank batch whose step fits, by binary search (the peak
// grows with the micro-batch); fills c (micro_batch 0 when micro-batch 1 does not fit).
void fit_micro_batch(const PlanRequest& r, const RunSpec& s, const Precision& p, PlanCandidate& c, Plan& plan) {
  const int64_t per_rank = r.global_batch / r.gpus;
  const uint64_t usable = usable_bytes(r);
  const std::vector<int64_t> d = divisors(per_rank);
  auto probe = [&](int64_t micro) {
    ++plan.meta_steps;
    return estimate_memory(s, micro, r.optimizer);
  };
  MemoryEstimate best = probe(1);
  if (plan.params == 0) plan.params = best.params;
  plan.static_bytes[str_cat(p.name, "/zero", c.zero)] = static_bytes(best);
  c.peak_reserved_bytes = best.peak_reserved_bytes;
  if (plan.smallest_peak_bytes < 0 || best.peak_reserved_bytes < plan.smallest_peak_bytes)
    plan.smallest_peak_bytes = best.peak_reserved_bytes;
  if (uint64_t(best.peak_reserved_bytes) > usable) {
    c.why_not = str_cat("does not fit: ", format_bytes(double(best.peak_reserved_bytes)), " at micro-batch 1");
    return;
  }
  size_t lo = 0, hi = d.size() - 1;   // d[lo] fits; find the largest that does
  int64_t best_micro = 1;
  while (lo < hi) {
    const size_t mid = (lo + hi + 1) / 2;
    MemoryEstimate e = probe(d[mid]);
    if (uint64_t(e.peak_reserved_bytes) <= usable) {
      lo = mid;
      best = e;
      best_micro = d[mid];
    } else {
      hi = mid - 1;
    }
  }
  c.micro_batch = best_micro;
  c.accumulate = per_rank / best_micro;
  c.peak_reserved_bytes = best.peak_reserved_bytes;
  time_candidate(r, p, best, c);
}

// The recommendation: the least time, then the smallest peak, among fitting candidates
// whose every term the calibration measured, communication aside (when any fits; else among
// all that fit).
// Measured: every term but the communication (which no candidate with several GPUs has
// measured) seen by the calibration.
bool measured(const PlanCandidate& c) {
  for (const std::string& u : c.unseen)
    if (u.rfind("communication", 0) != 0) return false;
  return true;
}

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
    {"zero", [](const PlanCandidate& c) { return std::to_string(c.zero); }},
};

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
                                               format_bytes(double(c.peak_reserved_bytes)), ")"));
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
  return s;
}

nlohmann::json PlanCandidate::to_json() const {
  return {{"precision", precision}, {"checkpoint", checkpoint}, {"attention", attention},
          {"channels_last", channels_last}, {"fuse_relu", fuse_relu}, {"zero", zero},
          {"micro_batch", micro_batch}, {"accumulate", accumulate}, {"fits", micro_batch > 0},
          {"peak_reserved_bytes", peak_reserved_bytes}, {"step_flops", step_flops},
          {"compute_bound_ms", compute_bound_ms}, {"predicted_ms", predicted_ms}, {"comm_ms", comm_ms},
          {"unseen_features", unseen},
          {"why_not", why_not}};
}

Plan make_plan(const PlanRequest& r, const std::function<void(const std::string&)>& progress) {
  OOMLAB_CHECK(r.gpus >= 1 && r.global_batch >= r.gpus && r.global_batch % r.gpus == 0, "--global-batch ",
               r.global_batch, " must be a multiple of --gpus ", r.gpus, " (each rank trains its share)");
  const ModelEntry m = model_entry(r.model.model);
  Plan plan;
  for (const Precision& p : precisions(r.gpu))
    for (const std::string& policy : checkpoint_policies(m))
      for (const Choice& ch : choices(m, r.gpus)) {
        PlanCandidate c;
        c.precision = p.name;
        c.checkpoint = policy;
        c.attention = ch.attention;
        c.channels_last = ch.channels_last;
        c.fuse_relu = ch.fuse_relu;
        c.zero = ch.zero;
        if (progress) progress(c.techniques());
        if (const auto it = plan.static_bytes.find(str_cat(p.name, "/zero", ch.zero));   // a bound: no meta step
            it != plan.static_bytes.end() && uint64_t(it->second) > usable_bytes(r)) {
          c.why_not = str_cat("does not fit: weights, gradients and optimizer state alone take ",
                              format_bytes(double(it->second)), " (", p.name, ")");
          plan.candidates.push_back(c);
          ++plan.pruned;
          continue;
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
        plan.candidates.push_back(c);
      }
  choose(plan);
  explain(plan);
  return plan;
}

namespace {
Precision precision_named(const GpuSpec& g, const std::string& name) {
  for (const Precision& p : precisions(g))
    if (p.name == name) return p;
  throw ValueError(str_cat("plan: no precision '", name, "' for ", g.name));
}
}  // namespace

std::string candidate_allow_tf32(const PlanRequest& r, const PlanCandidate& c) {
  return precision_named(r.gpu, c.precision).allow_tf32;
}

RunSpec candidate_train_spec(const PlanRequest& r, const PlanCandidate& c) {
  const ModelEntry m = model_entry(r.model.model);
  const Precision p = precision_named(r.gpu, c.precision);
  RunSpec s = candidate_spec(r, p, c.checkpoint, Choice{c.attention, c.channels_last, c.fuse_relu, c.zero});
  s.dataset = m.input == InputKind::tokens ? "synthetic-seq"
              : m.task == TaskKind::segmentation ? "synthetic-seg" : "synthetic";
  if (m.input == InputKind::tokens && s.seq_len <= 0) s.seq_len = m.defaults.seq_len;
  if (s.num_classes <= 0) s.num_classes = m.defaults.num_classes > 0 ? m.defaults.num_classes : 10;
  s.batch = c.micro_batch;
  s.accumulate = c.accumulate;
  s.optimizer = r.optimizer;
  return s;
}

std::string train_flags(const PlanRequest& r, const PlanCandidate& c) {
  const ModelEntry m = model_entry(r.model.model);
  std::string s = str_cat("--model ", r.model.model, " --dataset ",
                          m.input == InputKind::tokens ? "synthetic-seq"
                          : m.task == TaskKind::segmentation ? "synthetic-seg" : "synthetic",
                          " --batch ", c.micro_batch);
  if (m.input == InputKind::tokens)   // the length the meta steps used (0: the model's own)
    s += str_cat(" --seq-len ", r.model.seq_len > 0 ? r.model.seq_len : m.defaults.seq_len);
  if (c.accumulate > 1) s += str_cat(" --accumulate ", c.accumulate);
  s += " --optimizer " + r.optimizer + " --device cuda";
  if (c.precision == "bf16" || c.precision == "fp16") s += " --amp " + c.precision;
  if (c.precision == "half") s += " --half --master-weights";
  if (c.precision == "tf32") s += " --allow-tf32 all";
  if (c.precision == "fp32") s += " --allow-tf32 none";
  if (c.checkpoint != "none") s += " --checkpoint " + c.checkpoint;
  if (c.attention == "fused") s += " --attention fused";
  if (c.channels_last) s += " --channels-last";
  if (c.fuse_relu) s += " --fuse-relu on";
  if (r.gpus > 1) s += str_cat(" --parallel ddp --devices ", r.gpus);
  if (c.zero > 0) s += str_cat(" --zero ", c.zero);
  return s;
}

std::vector<std::string> cards_that_hold(int64_t peak_bytes, uint64_t reserve_bytes) {
  std::vector<std::string> out;
  for (const GpuSpec& g : gpu_table())
    if (g.memory_bytes >= reserve_bytes && g.memory_bytes - reserve_bytes >= uint64_t(peak_bytes))
      out.push_back(g.name);
  return out;
}

std::string pytorch_settings(const PlanRequest& r, const PlanCandidate& c) {
  std::string s = str_cat("micro-batch ", c.micro_batch);
  if (c.accumulate > 1)
    s += str_cat(", loss / ", c.accumulate, " and ", c.accumulate, " backward passes per optimizer step");
  if (c.precision == "bf16") s += ", torch.autocast(\"cuda\", dtype=torch.bfloat16)";
  if (c.precision == "fp16") s += ", torch.autocast(\"cuda\", dtype=torch.float16) with torch.amp.GradScaler()";
  if (c.precision == "tf32") s += ", torch.backends.cuda.matmul.allow_tf32 = True";
  if (c.precision == "fp32") s += ", torch.backends.cudnn.allow_tf32 = False";
  if (c.precision == "half")
    s += ", model.half() (BatchNorm float32) with float32 master weights for the optimizer and a GradScaler";
  if (c.checkpoint == "all") s += ", torch.utils.checkpoint around every block";
  if (c.checkpoint == "sqrt") s += ", torch.utils.checkpoint.checkpoint_sequential with sqrt(n) segments";
  if (c.checkpoint == "selective") s += ", torch.utils.checkpoint around each attention block";
  if (c.attention == "fused") s += ", F.scaled_dot_product_attention";
  if (c.channels_last) s += ", model and inputs .to(memory_format=torch.channels_last)";
  if (c.fuse_relu) s += ", ReLU fused into the op before it (eager PyTorch has no switch; torch.compile fuses it)";
  if (r.gpus > 1 && c.zero == 0)
    s += str_cat(", DistributedDataParallel over ", r.gpus, " GPUs (bucket_cap_mb=25, NCCL)");
  if (c.zero == 1) s += str_cat(", DDP over ", r.gpus, " GPUs with torch.distributed.optim.ZeroRedundancyOptimizer");
  if (c.zero == 2) s += str_cat(", DeepSpeed ZeRO stage 2 over ", r.gpus, " GPUs (or FSDP SHARD_GRAD_OP)");
  if (c.zero == 3) s += str_cat(", FSDP(ShardingStrategy.FULL_SHARD) over ", r.gpus, " GPUs, one unit per module");
  return s;
}

}  // namespace oomlab
