// driver.cpp — experiment 04_transformer_activation_memory: summary and verdict (registered
// with the runner; the points are `summary` and `estimate` runs of each BERT model x seq-len):
// per-layer activation bytes of BERT encoder layers (measured with saved-tensor hooks on
// the meta device) against Korthikanti et al. 2022's s*b*h*(34 + 5*a*s/h) (fp16) and its
// fp32 form s*b*h*(66 + 9*a*s/h), over a sweep of sequence lengths, plus the training
// peak (AdamW) of the whole model. Each encoder layer's attention core (QK^T, softmax,
// dropout, PV) is its own leaf row (attention.self.core); its measured bytes per point and
// their seq^2 part (the s^2 coefficient of a quadratic through the core's measured bytes
// over the sweep) give `attention_core_share` and `seq_squared_share`. Verdict: the
// formula, adjusted to fp32, matches every point within `source.tolerance` (relative).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <vector>

#include "experiments/runner/driver_util.h"
#include "experiments/runner/fit.h"
#include "experiments/runner/registry.h"
#include "experiments/runner/verdict_rule.h"

namespace oomlab {
namespace {
using json = nlohmann::json;

// The bytes saved by the attention core of each encoder layer (its one leaf
// DotProductAttention row); every layer's must be the same.
int64_t attention_core_bytes(const json& sum, const std::string& model) {
  int64_t core = -1;
  for (const json& t : sum["transformer_layers"]) {
    const std::string tname = t["name"];
    int64_t c = 0, n = 0;
    for (const json& l : sum["layers"])
      if (l["type"] == "DotProductAttention" && l["name"].get<std::string>().rfind(tname + ".", 0) == 0) {
        c += l["saved_bytes"].get<int64_t>();
        ++n;
      }
    OOMLAB_CHECK(n == 1, "experiment 04: ", tname, " has ", n, " attention-core rows (expected 1)");
    OOMLAB_CHECK(core < 0 || c == core, "experiment 04: attention cores of ", model, " differ (", tname, ")");
    core = c;
  }
  return core;
}

// The extremes over all rows that the verdict quotes.
struct Extremes {
  double worst_fp32 = 0, fp16_lo = 1e300, fp16_hi = 0, core_lo = 1e300, core_hi = 0, sq_lo = 1e300, sq_hi = 0;
  int64_t residual_lo = INT64_MAX, residual_hi = INT64_MIN;
  bool residual_is_ln = true, have_sq = true;
  void add(const json& r) {
    worst_fp32 = std::max(worst_fp32, std::abs(r["measured_over_fp32_formula"].get<double>() - 1.0));
    fp16_lo = std::min(fp16_lo, r["measured_over_fp16_formula"].get<double>());
    fp16_hi = std::max(fp16_hi, r["measured_over_fp16_formula"].get<double>());
    const int64_t residual = r["residual_over_fp32_formula_bytes"];
    residual_lo = std::min(residual_lo, residual);
    residual_hi = std::max(residual_hi, residual);
    residual_is_ln = residual_is_ln && residual == r["layernorm_stats_bytes"].get<int64_t>();
    core_lo = std::min(core_lo, r["attention_core_share"].get<double>());
    core_hi = std::max(core_hi, r["attention_core_share"].get<double>());
  }
};

// One (model, seq) point: the first encoder layer's saved bytes against the formulas, the
// attention core's share, the model's totals and training peak.
json layer_row(const std::string& model, int64_t s, const json& sum, const json& e) {
  OOMLAB_CHECK(sum.contains("transformer_layers") && !sum["transformer_layers"].empty(),
               "experiment 04: no transformer layers in ", model);
  const json& tl = sum["transformer_layers"];
  const json& r = tl[0];
  for (const json& o : tl)
    OOMLAB_CHECK(o["saved_bytes"] == r["saved_bytes"], "experiment 04: layers of ", model, " differ (",
                 o["name"].get<std::string>(), ")");
  const int64_t core = attention_core_bytes(sum, model), batch = sum["batch"];
  const int64_t saved = r["saved_bytes"], k32 = r["korthikanti_fp32_bytes"], k16 = r["korthikanti_fp16_bytes"];
  const int64_t hidden = r["hidden"], heads = r["heads"], nlayers = int64_t(tl.size());
  const int64_t sbh = s * batch * hidden, as2b = heads * s * s * batch;
  return {{"model", model}, {"seq", s}, {"batch", batch}, {"hidden", hidden}, {"heads", heads},
          {"layers", nlayers}, {"saved_bytes_per_layer", saved},
          {"attention_core_saved_bytes", core}, {"attention_core_share", double(core) / double(saved)},
          {"korthikanti_fp16_bytes", k16}, {"korthikanti_fp32_bytes", k32},
          {"measured_over_fp32_formula", double(saved) / double(k32)},
          {"measured_over_fp16_formula", double(saved) / double(k16)},
          {"residual_over_fp32_formula_bytes", saved - k32}, {"layernorm_stats_bytes", 16 * s * batch},
          {"linear_term_bytes", 66 * sbh}, {"attention_term_bytes", 9 * as2b},
          {"all_layers_saved_bytes", saved * nlayers},
          {"model_saved_bytes", sum["totals"]["saved_bytes"].get<int64_t>() +
                                    sum["totals"]["nonleaf_saved_bytes"].get<int64_t>()},
          {"training_peak_bytes", e["exact"]["peak_allocated_bytes"]}, {"params", e["params"]}};
}

// The seq^2 part of the measured attention-core rows: the s^2 coefficient of a quadratic
// through the core's measured bytes over this model's sweep.
void add_seq_squared(std::vector<json>& rows, const std::string& model, json& core_fits, Extremes& x) {
  std::vector<double> xs, core_bytes;
  for (const json& m : rows) {
    xs.push_back(m["seq"].get<double>());
    core_bytes.push_back(m["attention_core_saved_bytes"].get<double>());
  }
  const std::vector<double> c = quadratic_fit(xs, core_bytes);
  if (c.empty()) {
    x.have_sq = false;
    return;
  }
  double max_res = 0;
  for (size_t i = 0; i < xs.size(); ++i)
    max_res = std::max(max_res, std::abs(core_bytes[i] - (c[0] + c[1] * xs[i] + c[2] * xs[i] * xs[i])));
  core_fits[model] = {{"intercept_bytes", c[0]}, {"bytes_per_token", c[1]}, {"bytes_per_token_squared", c[2]},
                      {"max_abs_residual_bytes", max_res}};
  for (json& m : rows) {
    const double s = m["seq"].get<double>(), sq = c[2] * s * s;
    const double share = sq / m["saved_bytes_per_layer"].get<double>();
    m["seq_squared_bytes"] = sq;
    m["seq_squared_share"] = share;
    x.sq_lo = std::min(x.sq_lo, share);
    x.sq_hi = std::max(x.sq_hi, share);
  }
}

json summarize_04(const json& spec, json& points) {
  // Points by model, in matrix order, each with its sequence lengths.
  std::vector<std::string> models;
  std::map<std::pair<std::string, int64_t>, const json*> summary_at, estimate_at;
  for (const json* p : ok_points(points, "summary")) {
    const std::string model = (*p)["metrics"]["model"];
    if (std::find(models.begin(), models.end(), model) == models.end()) models.push_back(model);
    summary_at[{model, (*p)["metrics"]["input"][0].get<int64_t>()}] = p;
  }
  for (const json* p : ok_points(points, "estimate"))
    estimate_at[{(*p)["metrics"]["model"].get<std::string>(), point_option(*p, "seq-len").get<int64_t>()}] = p;
  OOMLAB_CHECK(!models.empty(), "experiment 04: no summary points");
  int64_t batch = 0;
  std::string opt;
  Extremes x;
  json core_fits = json::object(), all_rows = json::array();
  for (const std::string& model : models) {
    std::vector<json> rows;
    for (const auto& [key, sp] : summary_at) {
      if (key.first != model) continue;
      OOMLAB_CHECK(estimate_at.count(key), "experiment 04: no estimate point for ", model, " at seq-len ", key.second);
      const json& e = (*estimate_at[key])["metrics"];
      opt = e["optimizer"];
      rows.push_back(layer_row(model, key.second, (*sp)["metrics"], e));
      batch = rows.back()["batch"];
      x.add(rows.back());
    }
    add_seq_squared(rows, model, core_fits, x);
    for (json& m : rows) all_rows.push_back(m);
  }
  json out = {{"batch", batch}, {"optimizer", opt}, {"max_rel_error_vs_fp32_formula", x.worst_fp32},
              {"measured_over_fp16_formula_min", x.fp16_lo}, {"measured_over_fp16_formula_max", x.fp16_hi},
              {"residual_over_fp32_formula_min_bytes", x.residual_lo},
              {"residual_over_fp32_formula_max_bytes", x.residual_hi},
              {"residual_is_layernorm_stats", x.residual_is_ln},
              {"attention_core_share_min", x.core_lo}, {"attention_core_share_max", x.core_hi},
              {"profile", spec.value("profile", "")}, {"rows", all_rows}};
  if (x.have_sq) {
    out["seq_squared_share_min"] = x.sq_lo;
    out["seq_squared_share_max"] = x.sq_hi;
    out["attention_core_fits"] = core_fits;
  }
  for (json& p : points)   // digested: the rows above hold what the report needs
    if (p.value("command", "") == "summary" && p["metrics"].contains("layers")) p["metrics"].erase("layers");
  return out;
}

// Status: confirmed when the fp32-adjusted formula matches every point within the
// tolerance, else refuted. Each explanatory clause is written only when the summary's
// measured values show it.
json verdict_04(const json& spec, const json& summary) {
  const double tol = spec["source"].value("tolerance", 0.01);
  const double err = summary["max_rel_error_vs_fp32_formula"];
  const bool ok = err <= tol;
  char buf[600];
  std::string r;
  std::snprintf(buf, sizeof buf,
                "Measured activation bytes per encoder layer %s Korthikanti's formula adjusted to fp32, "
                "s*b*h*(66 + 9*a*s/h), %s %.3f%% at every point (tolerance %.1f%%)",
                ok ? "match" : "differ from", ok ? "within" : "by up to", 100 * err, 100 * tol);
  r += buf;
  if (summary.value("residual_is_layernorm_stats", false)) {
    r += "; the residual is layer_norm's saved mean/rstd (16*s*b bytes per layer), which the paper does not count.";
  } else if (summary.contains("residual_over_fp32_formula_min_bytes")) {
    std::snprintf(buf, sizeof buf,
                  "; the residual over the formula is %+lld to %+lld bytes per layer, not layer_norm's saved "
                  "mean/rstd (16*s*b) alone.",
                  (long long)summary["residual_over_fp32_formula_min_bytes"].get<int64_t>(),
                  (long long)summary["residual_over_fp32_formula_max_bytes"].get<int64_t>());
    r += buf;
  } else {
    r += ".";
  }
  std::snprintf(buf, sizeof buf, " Against the fp16 formula as printed we measure %.2f-%.2fx%s.",
                summary["measured_over_fp16_formula_min"].get<double>(),
                summary["measured_over_fp16_formula_max"].get<double>(), ok ? ", as expected for an fp32 run" : "");
  r += buf;
  if (summary.contains("seq_squared_share_min") && summary.contains("attention_core_share_min")) {
    std::snprintf(buf, sizeof buf,
                  " The attention core (its own attention.self.core row per layer) saves %.0f-%.0f%% of a layer's "
                  "bytes; the part of it growing with s^2 is %.1f-%.1f%%.",
                  100 * summary["attention_core_share_min"].get<double>(),
                  100 * summary["attention_core_share_max"].get<double>(),
                  100 * summary["seq_squared_share_min"].get<double>(),
                  100 * summary["seq_squared_share_max"].get<double>());
    r += buf;
  }
  return {{"status", verdict_status({judge_exact(ok)})}, {"reason", r}};   // exact (meta) bytes
}

}  // namespace

OOMLAB_REGISTER_EXPERIMENT({"04_transformer_activation_memory", summarize_04, verdict_04, {},
                            {{"source.tolerance", "positive"}}});

}  // namespace oomlab
