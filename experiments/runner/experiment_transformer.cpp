// experiment_transformer.cpp — runner for experiments/04_transformer_activation_memory:
// per-layer activation bytes of BERT encoder layers (measured with saved-tensor hooks on
// the meta device) against Korthikanti et al. 2022's s*b*h*(34 + 5*a*s/h) (fp16) and its
// fp32 form s*b*h*(66 + 9*a*s/h), over a sweep of sequence lengths, plus the training
// peak (AdamW) of the whole model. Each encoder layer's attention core (QK^T, softmax,
// dropout, PV) is its own leaf row (attention.self.core); its measured bytes per point and
// their seq^2 part (the s^2 coefficient of a quadratic through the core's measured bytes
// over the sweep) give `attention_core_share` and `seq_squared_share`. Verdict: the
// formula, adjusted to fp32, matches every point within `source.tolerance` (relative).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "engine/core/error.h"
#include "experiments/runner/experiment_runner_internal.h"
#include "experiments/cli/memory_report.h"

namespace oomlab {

namespace {
// Least-squares y = c0 + c1*x + c2*x^2 (x scaled by its maximum for conditioning);
// returns {c0, c1, c2} in unscaled units, or empty with fewer than 3 distinct x.
std::vector<double> quadratic_fit(const std::vector<double>& x, const std::vector<double>& y) {
  std::vector<double> ux = x;
  std::sort(ux.begin(), ux.end());
  if (std::unique(ux.begin(), ux.end()) - ux.begin() < 3) return {};
  const double xm = ux.back();
  double a[3][4] = {};
  for (size_t i = 0; i < x.size(); ++i) {
    const double u = x[i] / xm, basis[3] = {1.0, u, u * u};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) a[r][c] += basis[r] * basis[c];
      a[r][3] += basis[r] * y[i];
    }
  }
  for (int c = 0; c < 3; ++c) {   // Gaussian elimination with partial pivoting
    int piv = c;
    for (int r = c + 1; r < 3; ++r)
      if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    for (int k = 0; k < 4; ++k) std::swap(a[c][k], a[piv][k]);
    for (int r = 0; r < 3; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (int k = c; k < 4; ++k) a[r][k] -= f * a[c][k];
    }
  }
  return {a[0][3] / a[0][0], a[1][3] / a[1][1] / xm, a[2][3] / a[2][2] / (xm * xm)};
}
}  // namespace

nlohmann::json run_04(const nlohmann::json& spec, const std::string& profile, nlohmann::json& points) {
  using json = nlohmann::json;
  OOMLAB_CHECK(spec.contains("seq_lens") && spec["seq_lens"].contains(profile), "experiment.json: no seq_lens.",
               profile, " list");
  const std::vector<int64_t> seqs = spec["seq_lens"][profile].get<std::vector<int64_t>>();
  OOMLAB_CHECK(!seqs.empty(), "experiment.json: seq_lens.", profile, " is empty");
  const int64_t batch = spec.value("batch", int64_t(8));
  OOMLAB_CHECK(batch >= 1, "experiment.json: batch must be >= 1 (got ", batch, ")");
  const std::string opt = spec.value("optimizer", std::string("adamw"));
  double worst_fp32 = 0, worst_fp16_ratio_lo = 1e300, worst_fp16_ratio_hi = 0;
  double core_share_lo = 1e300, core_share_hi = 0, sq_share_lo = 1e300, sq_share_hi = 0;
  int64_t residual_lo = INT64_MAX, residual_hi = INT64_MIN;
  bool residual_is_ln = true, have_sq = true;
  json core_fits = json::object();
  for (const std::string model : spec["models"]) {
    OOMLAB_CHECK(model_is_transformer(model), "experiment 04: '", model, "' is not a BERT model");
    std::vector<json> rows;
    std::vector<double> xs, core_bytes;
    for (int64_t s : seqs) {
      ModelSpec ms;
      ms.model = model;
      ms.seq_len = s;
      ModelSummary sum = summarize_model(ms, batch);
      OOMLAB_CHECK(!sum.transformer_layers.empty(), "experiment 04: no transformer layers in ", model);
      const TransformerLayerRow& r = sum.transformer_layers[0];
      for (const TransformerLayerRow& o : sum.transformer_layers)
        OOMLAB_CHECK(o.saved_bytes == r.saved_bytes, "experiment 04: layers of ", model, " differ (", o.name, ")");
      // The attention core's own row (leaf DotProductAttention inside each encoder layer).
      int64_t core = -1;
      for (const TransformerLayerRow& t : sum.transformer_layers) {
        int64_t c = 0, n = 0;
        for (const LayerRow& l : sum.layers)
          if (l.type == "DotProductAttention" && l.name.rfind(t.name + ".", 0) == 0) { c += l.saved_bytes; ++n; }
        OOMLAB_CHECK(n == 1, "experiment 04: ", t.name, " has ", n, " attention-core rows (expected 1)");
        OOMLAB_CHECK(core < 0 || c == core, "experiment 04: attention cores of ", model, " differ (", t.name, ")");
        core = c;
      }
      MemoryEstimate e = estimate_memory(ms, batch, opt);
      const double vs32 = double(r.saved_bytes) / double(r.korthikanti_fp32_bytes);
      const double vs16 = double(r.saved_bytes) / double(r.korthikanti_fp16_bytes);
      worst_fp32 = std::max(worst_fp32, std::abs(vs32 - 1.0));
      worst_fp16_ratio_lo = std::min(worst_fp16_ratio_lo, vs16);
      worst_fp16_ratio_hi = std::max(worst_fp16_ratio_hi, vs16);
      const int64_t residual = r.saved_bytes - r.korthikanti_fp32_bytes, ln_stats = 16 * s * batch;
      residual_lo = std::min(residual_lo, residual);
      residual_hi = std::max(residual_hi, residual);
      residual_is_ln = residual_is_ln && residual == ln_stats;
      const double core_share = double(core) / double(r.saved_bytes);
      core_share_lo = std::min(core_share_lo, core_share);
      core_share_hi = std::max(core_share_hi, core_share);
      const int64_t sbh = s * batch * r.hidden, as2b = r.heads * s * s * batch;
      rows.push_back({{"seq", s}, {"batch", batch}, {"hidden", r.hidden}, {"heads", r.heads},
                      {"layers", int64_t(sum.transformer_layers.size())},
                      {"saved_bytes_per_layer", r.saved_bytes},
                      {"attention_core_saved_bytes", core}, {"attention_core_share", core_share},
                      {"korthikanti_fp16_bytes", r.korthikanti_fp16_bytes},
                      {"korthikanti_fp32_bytes", r.korthikanti_fp32_bytes},
                      {"measured_over_fp32_formula", vs32}, {"measured_over_fp16_formula", vs16},
                      {"residual_over_fp32_formula_bytes", residual},
                      {"layernorm_stats_bytes", ln_stats},
                      {"linear_term_bytes", 66 * sbh}, {"attention_term_bytes", 9 * as2b},
                      {"all_layers_saved_bytes", r.saved_bytes * int64_t(sum.transformer_layers.size())},
                      {"model_saved_bytes", sum.saved_bytes + sum.nonleaf_saved_bytes},
                      {"training_peak_bytes", e.peak_allocated_bytes}, {"params", e.params}});
      xs.push_back(double(s));
      core_bytes.push_back(double(core));
    }
    // The seq^2 part of the measured attention-core rows: the s^2 coefficient of a
    // quadratic through the core's measured bytes over this model's sweep.
    const std::vector<double> c = quadratic_fit(xs, core_bytes);
    if (c.empty()) {
      have_sq = false;
    } else {
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
        sq_share_lo = std::min(sq_share_lo, share);
        sq_share_hi = std::max(sq_share_hi, share);
      }
    }
    for (json& m : rows) {
      const int64_t s = m["seq"];
      points.push_back({{"name", model + " s=" + std::to_string(s)},
                        {"config", {{"model", model}, {"seq_len", s}, {"batch", batch}, {"optimizer", opt}}},
                        {"metrics", m}, {"memory", json::object()}});
    }
  }
  json out = {{"batch", batch}, {"optimizer", opt}, {"max_rel_error_vs_fp32_formula", worst_fp32},
              {"measured_over_fp16_formula_min", worst_fp16_ratio_lo},
              {"measured_over_fp16_formula_max", worst_fp16_ratio_hi},
              {"residual_over_fp32_formula_min_bytes", residual_lo},
              {"residual_over_fp32_formula_max_bytes", residual_hi},
              {"residual_is_layernorm_stats", residual_is_ln},
              {"attention_core_share_min", core_share_lo}, {"attention_core_share_max", core_share_hi},
              {"profile", profile}};
  if (have_sq) {
    out["seq_squared_share_min"] = sq_share_lo;
    out["seq_squared_share_max"] = sq_share_hi;
    out["attention_core_fits"] = core_fits;
  }
  return out;
}

// Status: confirmed when the fp32-adjusted formula matches every point within the
// tolerance, else refuted. Each explanatory clause is written only when the summary's
// measured values show it.
nlohmann::json verdict_04(const nlohmann::json& spec, const nlohmann::json& summary) {
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
  return {{"status", ok ? "confirmed" : "refuted"}, {"reason", r}};
}

}  // namespace oomlab
