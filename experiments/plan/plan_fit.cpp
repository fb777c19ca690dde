// plan_fit.cpp — one candidate's spec, fit and times for the planner (plan_fit.h).
#include "experiments/plan/plan_fit.h"

#include <algorithm>
#include <functional>

#include "engine/core/byte_sizes.h"
#include "engine/core/error.h"
#include "experiments/plan/comm_time.h"

namespace oomlab {

std::vector<Precision> precisions(const GpuSpec& g) {
  std::vector<Precision> out = {{"fp32", std::nullopt, "none"}};
  if (g.tf32_tflops != 0) out.push_back({"tf32", std::nullopt, "all"});   // < 0: unknown, searched
  if (g.bf16_tflops != 0) out.push_back({"bf16", DType::bf16, "cudnn"});
  if (g.fp16_tflops != 0) out.push_back({"fp16", DType::f16, "cudnn"});
  if (g.fp16_tflops != 0) out.push_back({"half", std::nullopt, "cudnn", true});
  return out;
}

Precision precision_named(const GpuSpec& g, const std::string& name) {
  for (const Precision& p : precisions(g))
    if (p.name == name) return p;
  throw ValueError(str_cat("plan: no precision '", name, "' for ", g.name));
}

uint64_t usable_bytes(const PlanRequest& r) {
  return r.gpu.memory_bytes > r.reserve_bytes ? r.gpu.memory_bytes - r.reserve_bytes : 0;
}

namespace {
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

// The micro-batches a rank may train: the divisors of its share of the global batch (the
// rest accumulated), or with r.accumulate false the whole share only.
std::vector<int64_t> micro_batches(const PlanRequest& r) {
  const int64_t per_rank = r.global_batch / r.gpus;
  return r.accumulate ? divisors(per_rank) : std::vector<int64_t>{per_rank};
}

}  // namespace

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
  // one DDP rank (its gradient buckets count: ddp_on_meta.h), or every DataParallel device;
  // ZeRO-Offload on one GPU too (a world of one)
  if (r.gpus > 1 || ch.offload != ZeroOffload::none) {
    s.parallel = ch.parallel;
    s.devices = r.gpus;
    s.zero_stage = ch.zero;
    s.offload = ch.offload;
  }
  return s;
}

namespace {
double bound_ms(const MemoryEstimate& e, const GpuSpec& g, bool tf32, int64_t accumulate) {
  double s = 0;
  for (const auto& [dtype, flops] : e.step_flops) {
    const double peak = g.peak_tflops(parse_dtype(dtype), tf32);
    if (peak > 0) s += flops / (peak * 1e12);
  }
  return s * 1e3 * double(accumulate);
}

double work_bound_ms(const StepCost& w, const GpuSpec& g, bool tf32) {
  double s = 0;
  for (const auto& [kind, by_dtype] : w.flops)
    for (const auto& [dtype, flops] : by_dtype) {
      const double peak = g.peak_tflops(parse_dtype(dtype), tf32);
      if (peak > 0) s += flops / (peak * 1e12);
    }
  return s * 1e3;
}

// DataParallel: how much longer than device 0's own replica work the slowest device's takes
// (balanced DataParallel gives the others more samples); `ms` prices one device's work.
double dp_straggler_ms(const MemoryEstimate& e, const std::function<double(const StepCost&)>& ms) {
  if (e.dp_devices.empty()) return 0;
  const double own = ms(e.dp_devices[0].work);
  double slowest = own;
  for (const DpDeviceEstimate& d : e.dp_devices) slowest = std::max(slowest, ms(d.work));
  return slowest - own;
}

// The communication of one optimizer step: DDP's all-reduce of the synchronised micro-step,
// or DataParallel's copies, made every micro-step.
CommTime step_comm(const PlanRequest& r, const MemoryEstimate& e, const PlanCandidate& c) {
  if (e.dp_devices.empty()) return ddp_comm_time(e.ddp_bucket_bytes, r.gpus, r.gpu, c.zero);
  DpCopyBytes b{e.params_bytes + e.buffers_bytes, e.grads_bytes, e.input_bytes, {}};
  for (const DpDeviceEstimate& d : e.dp_devices) b.chunks.push_back(d.chunk);
  CommTime t = dp_comm_time(b, r.gpu);
  if (t.total_ms > 0) t.total_ms *= double(c.accumulate), t.last_bucket_ms = t.total_ms;   // none of it overlaps
  return t;
}

// Fills c's times from the meta step `e` at its micro-batch; with DDP the all-reduce of the
// synchronised micro-step: whole in the prediction (no overlap), its last bucket in the bound;
// with DataParallel device 0's work, the slowest device's excess over it and every copy.
void time_candidate(const PlanRequest& r, const Precision& p, const MemoryEstimate& e, PlanCandidate& c) {
  for (const auto& [dtype, flops] : e.step_flops) c.step_flops += flops * double(c.accumulate);
  const CommTime comm = step_comm(r, e, c);
  c.comm_ms = comm.total_ms;
  const bool tf32 = std::string(p.allow_tf32) == "all";
  const double straggler_bound = dp_straggler_ms(e, [&](const StepCost& w) { return work_bound_ms(w, r.gpu, tf32); });
  c.compute_bound_ms = bound_ms(e, r.gpu, tf32, c.accumulate) + straggler_bound * double(c.accumulate) +
                       std::max(0.0, comm.last_bucket_ms);
  if (!r.time_model || r.gpu.bandwidth_gbps <= 0) return;
  const Tf32Use use = parse_tf32_use(p.allow_tf32);
  const TimeFeatures f = time_features(e, r.gpu, use);
  const double straggler = dp_straggler_ms(e, [&](const StepCost& w) {
    MemoryEstimate only;   // the device's work alone: no optimizer traffic
    only.step_cost = w;
    return r.time_model->predict_ms(time_features(only, r.gpu, use));
  });
  // ZeRO-Offload's copies through the host link (each micro-step's, and the step's)
  const double copied = double(e.offload_micro_copy_bytes) * double(c.accumulate) + double(e.offload_step_copy_bytes);
  c.offload_ms = copied > 0 && r.gpu.host_link_gbps > 0 ? copied / (r.gpu.host_link_gbps * 1e9) * 1e3 : 0;
  c.predicted_ms = (r.time_model->predict_ms(f) + straggler) * double(c.accumulate) + std::max(0.0, comm.total_ms) +
                   c.offload_ms;
  c.unseen = r.time_model->unseen(f);
  if (copied > 0)
    c.unseen.push_back("offload (the host's optimizer step: no record; its copies at the host link's datasheet rate)");
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

// Samples of one micro-step's meta step per share: a DDP rank trains its own, DataParallel's
// step holds every device's.
int64_t samples_per_share(const RunSpec& s) {
  return s.parallel == ParallelMode::dp || s.parallel == ParallelMode::bdp ? s.devices : 1;
}

}  // namespace

// The static bytes' key: precision and the sharding (DataParallel's device 0 holds all of it).
std::string static_key(const std::string& precision, const Choice& ch) {
  if (ch.parallel == ParallelMode::dp || ch.parallel == ParallelMode::bdp) return precision + "/dp";
  return str_cat(precision, "/zero", ch.zero, ch.offload == ZeroOffload::none ? "" : "+offload-",
                 ch.offload == ZeroOffload::none ? "" : zero_offload_name(ch.offload));
}

// The largest of micro_batches(r) whose step fits, by binary search (the peak grows with the
// micro-batch); fills c (micro_batch 0 when the least does not fit).
// DataParallel: the share is each device's; every device must fit.
void fit_micro_batch(const PlanRequest& r, const RunSpec& s, const Precision& p, PlanCandidate& c, Plan& plan) {
  const int64_t per_rank = r.global_batch / r.gpus;
  const uint64_t usable = usable_bytes(r);
  const std::vector<int64_t> d = micro_batches(r);
  auto probe = [&](int64_t share) {
    ++plan.meta_steps;
    return estimate_memory(s, share * samples_per_share(s), r.optimizer);
  };
  MemoryEstimate best = probe(d[0]);
  if (plan.params == 0) plan.params = best.params;
  plan.static_bytes[static_key(p.name, Choice{"", false, false, c.zero, s.parallel})] = static_bytes(best);
  c.peak_reserved_bytes = best.dp_max_peak_reserved_bytes();
  if (plan.smallest_peak_bytes < 0 || c.peak_reserved_bytes < plan.smallest_peak_bytes)
    plan.smallest_peak_bytes = c.peak_reserved_bytes;
  if (uint64_t(c.peak_reserved_bytes) > usable) {
    c.why_not = str_cat("does not fit: ", format_bytes(double(c.peak_reserved_bytes)), " at micro-batch ", d[0]);
    return;
  }
  size_t lo = 0, hi = d.size() - 1;   // d[lo] fits; find the largest that does
  while (lo < hi) {
    const size_t mid = (lo + hi + 1) / 2;
    MemoryEstimate e = probe(d[mid]);
    if (uint64_t(e.dp_max_peak_reserved_bytes()) <= usable) {
      lo = mid;
      best = e;
    } else {
      hi = mid - 1;
    }
  }
  c.micro_batch = d[lo];
  c.accumulate = per_rank / d[lo];
  c.peak_reserved_bytes = best.dp_max_peak_reserved_bytes();
  time_candidate(r, p, best, c);
}

namespace {
// Balanced DataParallel at one share: the largest device-0 share g <= share whose device 0
// fits (its peak grows with g, the others' shrink), then whether every device fits at g.
std::optional<MemoryEstimate> fit_balanced_share(const PlanRequest& r, RunSpec s, int64_t share, Plan& plan) {
  const uint64_t usable = usable_bytes(r);
  std::optional<MemoryEstimate> found;
  int64_t lo = 0, hi = share;   // the largest g in [lo, hi] with device 0 fitting
  while (lo <= hi) {
    const int64_t g = (lo + hi) / 2;
    s.gpu0_bsz = g;
    ++plan.meta_steps;
    MemoryEstimate e = estimate_memory(s, share * r.gpus, r.optimizer);
    if (uint64_t(e.dp_devices[0].peak_reserved_bytes) <= usable) {
      found = e;
      lo = g + 1;
    } else {
      hi = g - 1;
    }
  }
  if (!found || uint64_t(found->dp_max_peak_reserved_bytes()) > usable) return std::nullopt;
  return found;
}

}  // namespace

PlanCandidate fit_balanced_dp(const PlanRequest& r, const PlanCandidate& from, Plan& plan) {
  PlanCandidate c;
  c.precision = from.precision;
  c.checkpoint = from.checkpoint;
  c.attention = from.attention;
  c.channels_last = from.channels_last;
  c.fuse_relu = from.fuse_relu;
  c.parallel = "bdp";
  const Precision p = precision_named(r.gpu, c.precision);
  const RunSpec s = candidate_spec(r, p, c.checkpoint,
                                   Choice{c.attention, c.channels_last, c.fuse_relu, 0, ParallelMode::bdp});
  const int64_t per_rank = r.global_batch / r.gpus;
  const std::vector<int64_t> d = micro_batches(r);
  const auto from_share = std::find(d.begin(), d.end(), from.micro_batch);
  size_t lo = from_share == d.end() ? 0 : size_t(from_share - d.begin());
  std::optional<MemoryEstimate> best = fit_balanced_share(r, s, d[lo], plan);
  c.peak_reserved_bytes = from.peak_reserved_bytes;
  if (!best) {
    c.why_not = str_cat("does not fit: no share of device 0 lets every device hold ", d[lo], " sample(s) each");
    return c;
  }
  for (size_t hi = d.size() - 1; lo < hi;) {   // the largest share that fits
    const size_t mid = (lo + hi + 1) / 2;
    if (std::optional<MemoryEstimate> e = fit_balanced_share(r, s, d[mid], plan)) lo = mid, best = e;
    else hi = mid - 1;
  }
  c.micro_batch = d[lo];
  c.accumulate = per_rank / d[lo];
  c.gpu0_bsz = best->dp_devices[0].chunk;
  c.peak_reserved_bytes = best->dp_max_peak_reserved_bytes();
  time_candidate(r, p, *best, c);
  return c;
}

}  // namespace oomlab
