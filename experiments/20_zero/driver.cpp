// driver.cpp — experiment 20_zero (issue 53): summary and verdict (registered with the
// runner). Points: `oomlab estimate --parallel ddp --devices N [--zero 1|2|3]` on meta of a
// scaled BERT in mixed precision (fp16 weights, float32 masters, AdamW: K = 12): one rank
// of N, exactly.
// Summary: per (stage, N) the rank's model states (metrics.model_state_bytes: parameters,
// gradients, optimizer state, masters, shards) per parameter beside the paper's formula
// (16; 4 + 12 / N; 2 + 14 / N; 16 / N), both scaled to the paper's Psi = 7.5B in GB, and the
// bytes the rank sends per step beside DDP's; per stage the largest model whose
// model states fit a source.card_bytes card at N = source.card_ranks; per (stage,
// checkpoint) at N = 64 the whole peak with activations (batch 4 x 512 tokens).
// Step time rows (step_time_cpu: train on two CPU thread ranks, DDP and the stages alternating
// over rounds): per stage the median step and its step over DDP's paired by round; shown in
// the reason, not judged (the paper's time claims concern GPUs and their network).
// Offload rows (--offload optimizer|params): per (stage, N) the device's model states and the
// host's bytes (metrics.ddp.offload_host_bytes) per parameter beside ZeRO-Offload's split
// (device: stage 1 4, stage 2 2, stage 3 2 / N, or none with the parameters offloaded too;
// host: 12 / N, + 2 / N for the parameters).
// Verdict (exact figures, verdict_rule.h): per (stage, N), ours within source.tolerance of
// the formula; per (stage, N) the bytes sent within source.tolerance of DDP's at that N (1.5
// times DDP's for stage 3: its parameters are gathered for forward and again for backward);
// per offload row, device and host within source.tolerance of the split.
#include <algorithm>
#include <cmath>
#include <map>

#include "experiments/runner/driver_util.h"
#include "experiments/runner/registry.h"
#include "experiments/runner/verdict_rule.h"

namespace oomlab {
namespace {
using json = nlohmann::json;

double formula_per_param(const std::string& stage, double n) {
  if (stage == "zero1") return 4 + 12 / n;
  if (stage == "zero2") return 2 + 14 / n;
  if (stage == "zero3") return 16 / n;
  return 16;
}

json state_rows(const json& spec, const std::vector<const json*>& points) {
  const double paper_params = spec["source"]["paper_params"].get<double>();
  std::map<int64_t, double> ddp_sent;   // per rank count
  for (const json* p : points)
    if ((*p)["axes"]["stage"] == "ddp")
      ddp_sent[point_option(*p, "devices").get<int64_t>()] =
          (*p)["metrics"]["ddp"]["bytes_sent_per_step"].get<double>();
  json rows = json::array();
  for (const json* p : points) {
    const json& m = (*p)["metrics"];
    const std::string stage = (*p)["axes"]["stage"].get<std::string>();
    const int64_t n = point_option(*p, "devices").get<int64_t>();
    const double params = m["params"].get<double>(), states = m["model_state_bytes"].get<double>();
    const double ours = states / params, paper = formula_per_param(stage, double(n));
    const double sent = m["ddp"]["bytes_sent_per_step"].get<double>();
    rows.push_back({{"stage", stage}, {"ranks", n}, {"params", params}, {"model_state_bytes", states},
                    {"per_param", ours}, {"formula_per_param", paper}, {"error", (ours - paper) / paper},
                    {"ours_gb_at_paper_params", ours * paper_params / 1e9},
                    {"formula_gb_at_paper_params", paper * paper_params / 1e9},
                    {"bytes_sent", sent}, {"ddp_bytes_sent", ddp_sent.count(n) ? ddp_sent[n] : 0.0},
                    {"paper_sent_over_ddp", stage == "zero3" ? 1.5 : 1.0},   // 3 Psi against 2 Psi
                    {"peak_bytes", m["exact"]["peak_allocated_bytes"]}});
  }
  return rows;
}

// ZeRO-Offload's split of one rank's model states (bytes per parameter): the device keeps the
// fp16 parameters (stage 3: its shard, none when they are offloaded too) and, with stage 1,
// the fp16 gradients (stages 2 and 3 stream theirs to the host); the host the fp32 masters,
// momentum and variance shards (12 / N) and with params the fp16 parameter shard.
std::pair<double, double> offload_split(const std::string& stage, double n) {
  if (stage == "zero1+optimizer") return {4, 12 / n};
  if (stage == "zero2+optimizer") return {2, 12 / n};
  if (stage == "zero3+optimizer") return {2 / n, 12 / n};
  return {0, 14 / n};   // zero3+params
}

// Relative error, or the bytes per parameter themselves where the formula says none.
double split_error(double ours, double formula) { return formula > 0 ? (ours - formula) / formula : ours; }

json offload_rows(const json& spec, const std::vector<const json*>& points) {
  const double paper_params = spec["source"]["paper_params"].get<double>();
  json rows = json::array();
  for (const json* p : points) {
    const json& m = (*p)["metrics"];
    const std::string stage = (*p)["axes"]["stage"].get<std::string>();
    const int64_t n = point_option(*p, "devices").get<int64_t>();
    const double params = m["params"].get<double>();
    const double device = m["model_state_bytes"].get<double>() / params;
    const double host = m["ddp"]["offload_host_bytes"].get<double>() / params;
    const auto [fd, fh] = offload_split(stage, double(n));
    rows.push_back({{"stage", stage}, {"ranks", n}, {"params", params}, {"device_per_param", device},
                    {"formula_device_per_param", fd}, {"host_per_param", host}, {"formula_host_per_param", fh},
                    {"device_error", split_error(device, fd)}, {"host_error", split_error(host, fh)},
                    {"device_gb_at_paper_params", device * paper_params / 1e9},
                    {"host_gb_at_paper_params", host * paper_params / 1e9},
                    {"host_peak_bytes", m["ddp"]["offload_host_peak_bytes"]},
                    {"peak_bytes", m["exact"]["peak_allocated_bytes"]}});
  }
  return rows;
}

// Per stage on CPU thread ranks: the median step time and, for each stage but DDP, its step
// over DDP's paired by round (the block runs DDP and the stages alternately).
json time_rows(const std::vector<const json*>& points) {
  std::map<std::string, std::vector<double>> steps;   // per stage, in round order
  std::vector<std::string> order;
  for (const json* p : points) {
    const std::string stage = (*p)["axes"]["stage"].get<std::string>();
    if (!steps.count(stage)) order.push_back(stage);
    steps[stage].push_back((*p)["metrics"]["step_time_s"]["median"].get<double>());
  }
  json rows = json::array();
  for (const std::string& stage : order) {
    std::vector<double> v = steps[stage];
    std::sort(v.begin(), v.end());
    json r = {{"stage", stage}, {"median_step_s", v[v.size() / 2]}, {"step_times_s", steps[stage]}};
    if (stage != "ddp" && steps.count("ddp") && steps["ddp"].size() == steps[stage].size())
      r["over_ddp"] = interval_json(paired_ratio(steps[stage], steps["ddp"]));
    rows.push_back(r);
  }
  return rows;
}

json largest_models(const json& spec, const json& rows) {
  const double card = spec["source"]["card_bytes"].get<double>();
  const int64_t ranks = spec["source"]["card_ranks"].get<int64_t>();
  json out = json::array();
  for (const json& r : rows)
    if (r["ranks"].get<int64_t>() == ranks)
      out.push_back({{"stage", r["stage"]}, {"ranks", ranks}, {"params", card / r["per_param"].get<double>()}});
  return out;
}

json peak_rows(const std::vector<const json*>& points) {
  json rows = json::array();
  for (const json* p : points) {
    const json& m = (*p)["metrics"];
    rows.push_back({{"stage", (*p)["axes"]["stage"]}, {"checkpoint", (*p)["axes"]["checkpoint"]},
                    {"params", m["params"]}, {"model_state_bytes", m["model_state_bytes"]},
                    {"peak_bytes", m["exact"]["peak_allocated_bytes"]},
                    {"peak_reserved_bytes", m["exact"]["peak_reserved_bytes"]}});
  }
  return rows;
}

std::vector<const json*> block(const std::vector<const json*>& points, const std::string& name) {
  std::vector<const json*> out;
  for (const json* p : points)
    if ((*p).value("block", "") == name) out.push_back(p);
  return out;
}

json summarize_20(const json& spec, json& points) {
  const std::vector<const json*> all = ok_points(points, "estimate");
  const std::vector<const json*> trained = ok_points(points, "train");
  const json states = state_rows(spec, block(all, "model_states"));
  json peaks = peak_rows(block(all, "whole_peak"));
  for (const json& r : peak_rows(block(all, "whole_peak_zero3"))) peaks.push_back(r);
  return {{"rows", states}, {"largest", largest_models(spec, states)}, {"peaks", peaks},
          {"offload", offload_rows(spec, block(all, "offload"))},
          {"step_time_cpu", time_rows(block(trained, "step_time_cpu"))}, {"profile", spec.value("profile", "")}};
}

// "The whole peak at 64 ranks (4 x 512 tokens): DDP X GiB, ZeRO-2 with checkpoint all Y GiB. "
std::string peak_text(const json& peaks) {
  std::string ddp, best, three;
  for (const json& r : peaks) {
    const std::string gib = str_cat(std::round(r["peak_bytes"].get<double>() / (1 << 30) * 100) / 100, " GiB");
    if (r["stage"] == "ddp" && r["checkpoint"] == "none") ddp = gib;
    if (r["stage"] == "zero2" && r["checkpoint"] == "all") best = gib;
    if (r["stage"] == "zero3") three = gib;
  }
  if (ddp.empty() || best.empty()) return "";
  return str_cat("The whole peak with activations at 64 ranks (4 x 512 tokens): DDP ", ddp,
                 ", ZeRO-2 with every block checkpointed ", best, three.empty() ? "" : ", ZeRO-3 " + three, ".");
}

// "ZeRO-Offload: device and host within X of the split (N rows); one rank of ZeRO-2 keeps
// Y GB of model states for 13B parameters on the device (the paper: fits a 32 GB V100)."
std::string judge_offload(const json& spec, const json& s, double tol, std::vector<Judged>& parts) {
  double worst = 0, single = -1;
  for (const json& r : s["offload"]) {
    const double err = std::max(std::abs(r["device_error"].get<double>()), std::abs(r["host_error"].get<double>()));
    parts.push_back(judge_exact(err <= tol));
    worst = std::max(worst, err);
    if (r["stage"] == "zero2+optimizer" && r["ranks"] == 1) single = r["device_per_param"].get<double>();
  }
  if (s["offload"].empty()) return "";
  const double big = spec["source"].value("offload_single_gpu_params", 13e9);
  const double card = spec["source"].value("offload_single_gpu_bytes", 32e9);
  return str_cat(" ZeRO-Offload: device and host bytes per parameter within ", pct_text(worst), " of its split (",
                 s["offload"].size(), " settings)",
                 single < 0 ? std::string(".")
                            : str_cat("; one ZeRO-2 rank with the optimizer offloaded keeps ",
                                      std::round(single * big / 1e8) / 10, " GB of model states on the device for ",
                                      big / 1e9, "B parameters (the paper: trains on one ", card / 1e9,
                                      " GB V100; activations aside)."));
}

// " On two CPU thread ranks (not judged: the paper's time claims are a GPU cluster's) a
// step takes 1.01x DDP's with ZeRO-1 (95% CI ...), ..."
std::string time_text(const json& rows) {
  std::string out;
  for (const json& r : rows)
    if (r.contains("over_ddp"))
      out += str_cat(out.empty() ? "" : ", ", r["stage"].get<std::string>(), " ",
                     interval_text(interval_from_json(r["over_ddp"]), "pairs", 1.0, "x"));
  if (out.empty()) return "";
  return str_cat(" Step time on two CPU thread ranks over DDP's (measured, not judged: the paper's time claims "
                 "concern GPUs and their network): ", out, ".");
}

json verdict_20(const json& spec, const json& s) {
  const double tol = spec["source"]["tolerance"].get<double>();
  std::vector<Judged> parts;
  double worst = 0, worst_sent = 0;
  std::string at_paper;
  for (const json& r : s["rows"]) {
    const double err = std::abs(r["error"].get<double>());
    const double ddp = r["ddp_bytes_sent"].get<double>();
    const double ours = r["bytes_sent"].get<double>();   // one rank sends nothing, as DDP's
    const double times = r["paper_sent_over_ddp"].get<double>();   // stage 3 gathers twice: 3 Psi
    const double sent = ddp > 0 ? std::abs(ours - times * ddp) / (times * ddp) : ours == 0 ? 0.0 : 1.0;
    parts.push_back(judge_exact(err <= tol));
    parts.push_back(judge_exact(sent <= tol));
    worst = std::max(worst, err), worst_sent = std::max(worst_sent, sent);
    if (r["ranks"].get<int64_t>() == spec["source"]["paper_ranks"].get<int64_t>())
      at_paper += str_cat(at_paper.empty() ? "" : ", ", r["stage"].get<std::string>(), " ",
                          std::round(r["ours_gb_at_paper_params"].get<double>() * 10) / 10, " GB (paper ",
                          spec["source"]["paper_gb"].value(r["stage"].get<std::string>(), 0.0), ")");
  }
  const std::string reason = str_cat(
      "Exact meta ranks of a ", s["rows"].empty() ? 0.0 : std::round(s["rows"][0]["params"].get<double>() / 1e7) / 100,
      "B-parameter BERT in mixed-precision AdamW at ", s["rows"].size(), " (stage, ranks) settings: model states per "
      "parameter within ", pct_text(worst), " of the paper's formulas (tolerance ", pct_text(tol), "); scaled to "
      "Psi = 7.5B at 64 ranks: ", at_paper.empty() ? "not in this profile" : at_paper,
      ". Bytes sent per step within ", pct_text(worst_sent), " of DDP's (stages 1 and 2: reduce-scatter + "
      "all-gather = all-reduce) and of 1.5 times DDP's (stage 3). ", peak_text(s["peaks"]),
      judge_offload(spec, s, tol, parts), time_text(s.value("step_time_cpu", json::array())));
  return {{"status", verdict_status(parts)}, {"reason", reason}};
}

}  // namespace

OOMLAB_REGISTER_EXPERIMENT({"20_zero", summarize_20, verdict_20, {},
                            {{"source.tolerance", "positive"}, {"source.paper_params", "positive"},
                             {"source.card_bytes", "positive"}, {"source.card_ranks", "positive"},
                             {"source.paper_ranks", "positive"}}});

}  // namespace oomlab
