// driver.cpp — experiment 19_what_fits (issue 52): summary and verdict (registered with the
// runner). Points: `oomlab plan` (meta; the calibrated time model of reports/
// plan_calibration.json) of zoo and imported models at a global batch, on a 16 GB, a 24 GB
// and an 80 GB card.
// Summary: one row per (model, card): parameters; what the formula calculators would say
// (Hugging Face accelerate's "training using Adam: about 4x the model size", 16 bytes per
// float32 parameter; DeepSpeed's ZeRO-2 estimator without offload on one GPU, 4 P + 16 P / N
// bytes) and whether that fits the card less the reserve; the plain candidate (fp32, no
// checkpointing, eager attention) with its largest micro-batch, exact peak and accumulation;
// the recommendation with its techniques, micro-batch x accumulation, exact peak, predicted
// step time and samples/s.
// Verdict (verdict_rule.h; exact figures): per row, DeepSpeed's formula within
// source.formula_tolerance of the plain candidate's exact peak; per row where the formula
// says it fits, the plain step at the whole batch fits too (no accumulation needed); the time
// model's leave-one-configuration-out median error <= source.time_error_bar on the GPU
// records; a recommendation measured on the card itself pending a GPU (plan --verify).
#include <algorithm>
#include <cmath>

#include "experiments/runner/driver_util.h"
#include "experiments/runner/registry.h"
#include "experiments/runner/verdict_rule.h"

namespace oomlab {
namespace {
using json = nlohmann::json;

const json* plain_candidate(const json& m) {
  for (const json& c : m["candidates"])
    if (c["precision"] == "fp32" && c["checkpoint"] == "none" && c["attention"] != "fused" &&
        !c.value("channels_last", false) && !c.value("fuse_relu", false))
      return &c;
  return nullptr;
}

json row_of(const json& p, double reserve) {
  const json& m = p["metrics"];
  const json& cfg = p["config"];
  const double params = m["params"].get<double>(), capacity = cfg["gpu"]["memory_bytes"].get<double>();
  json row = {{"model", p["axes"]["model"]}, {"gpu", cfg["gpu"]["name"]}, {"capacity_bytes", capacity},
              {"params", params}, {"global_batch", cfg["global_batch"]},
              {"accelerate_bytes", 16 * params}, {"deepspeed_zero2_bytes", 20 * params}};
  row["formula_fits"] = 20 * params <= capacity - reserve;
  if (const json* c = plain_candidate(m)) {
    row["plain"] = {{"fits", (*c)["fits"]}, {"micro_batch", (*c)["micro_batch"]}, {"accumulate", (*c)["accumulate"]},
                    {"peak_bytes", (*c)["peak_reserved_bytes"]}};
    const double exact = (*c)["peak_reserved_bytes"].get<double>();
    row["deepspeed_error"] = (20 * params - exact) / exact;
  }
  if (m.contains("recommended")) {
    const json& c = m["candidates"][m["recommended"]["candidate"].get<size_t>()];
    const double ms = c["predicted_ms"].get<double>();
    row["recommended"] = {{"precision", c["precision"]}, {"checkpoint", c["checkpoint"]},
                          {"attention", c["attention"]}, {"channels_last", c.value("channels_last", false)},
                          {"fuse_relu", c.value("fuse_relu", false)}, {"micro_batch", c["micro_batch"]},
                          {"accumulate", c["accumulate"]}, {"peak_bytes", c["peak_reserved_bytes"]},
                          {"predicted_ms", ms},
                          {"samples_per_s", ms > 0 ? cfg["global_batch"].get<double>() / ms * 1e3 : 0},
                          {"train_flags", m["recommended"]["train_flags"]}};
  } else {
    row["smallest_peak_bytes"] = m["smallest_peak_bytes"];
  }
  return row;
}

json summarize_19(const json& spec, json& points) {
  const double reserve = spec["source"]["reserve_bytes"].get<double>();
  json rows = json::array(), calibration;
  for (const json* p : ok_points(points, "plan")) {
    rows.push_back(row_of(*p, reserve));
    if (calibration.is_null()) calibration = (*p)["metrics"]["time_model"].value("summary", json());
  }
  return {{"rows", rows}, {"calibration", calibration}, {"profile", spec.value("profile", "")}};
}

json verdict_19(const json& spec, const json& s) {
  const double tol = spec["source"]["formula_tolerance"].get<double>();
  const double bar = spec["source"]["time_error_bar"].get<double>();
  std::vector<Judged> parts;
  int within = 0, judged = 0, says_fits = 0, needs_more = 0;
  double lo = 1e300, hi = -1e300;
  for (const json& r : s["rows"]) {
    if (!r.contains("deepspeed_error")) continue;
    const double err = r["deepspeed_error"].get<double>();
    parts.push_back(judge_exact(std::abs(err) <= tol));
    ++judged, within += std::abs(err) <= tol;
    lo = std::min(lo, err), hi = std::max(hi, err);
    if (!r["formula_fits"].get<bool>()) continue;
    const bool whole = r["plain"]["fits"].get<bool>() && r["plain"]["accumulate"].get<int64_t>() == 1;
    parts.push_back(judge_exact(whole));
    ++says_fits, needs_more += !whole;
  }
  const bool calibrated = s["calibration"].is_object() && s["calibration"].contains("median_relative_error");
  const double median = calibrated ? s["calibration"]["median_relative_error"].get<double>() : 1.0;
  parts.push_back(calibrated ? judge_exact(median <= bar) : Judged::fails);
  parts.push_back(Judged::pending_gpu);
  const std::string reason = str_cat(
      "oomlab plan on meta for ", s["rows"].size(),
      " (model, card) pairs. DeepSpeed's ZeRO-2 formula (20 bytes per "
      "parameter on one GPU) lands within ",
      pct_text(tol), " of the exact peak of the plain fp32 step for ", within, " of ", judged, " (its error runs from ",
      pct_text(lo), " to ", pct_text(hi),
      ": it counts no activations). Where it says the "
      "model fits (",
      says_fits, " pairs), the plain step at the whole batch does not fit in ", needs_more,
      ": the batch needs accumulation or the techniques the plan picks. The plan's step times come from a model "
      "fitted on the GPU records: leave-one-configuration-out median error ",
      calibrated ? pct_text(median) : "unknown", " (bar ", pct_text(bar),
      "). A recommendation run on the card itself "
      "(plan --verify) is pending a GPU.");
  return {{"status", verdict_status(parts)}, {"reason", reason}};
}

}  // namespace

OOMLAB_REGISTER_EXPERIMENT({"19_what_fits", summarize_19, verdict_19, {},
                            {{"source.formula_tolerance", "positive"}, {"source.time_error_bar", "positive"},
                             {"source.reserve_bytes", "positive"}}});

}  // namespace oomlab
