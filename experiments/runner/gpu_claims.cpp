// gpu_claims.cpp — an experiment's gpu-profile claims: checked, summarised, judged
// (gpu_claims.h).
#include "experiments/runner/gpu_claims.h"

#include <algorithm>
#include <set>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "experiments/runner/verdict_rule.h"

namespace oomlab {
using json = nlohmann::json;

namespace {
const char* const kClaimKeys[] = {"name", "metric", "other", "base", "below", "above", "within"};
const char* const kPlainMetrics[] = {"step_time", "peak_allocated", "peak_reserved", "ok"};

bool known_metric(const std::string& m) {
  return std::find(std::begin(kPlainMetrics), std::end(kPlainMetrics), m) != std::end(kPlainMetrics) ||
         (m.rfind("metrics.", 0) == 0 && m.size() > 8);
}

bool matches(const json& selector, const json& point) {
  if (point.value("block", std::string()) != selector.value("block", std::string())) return false;
  for (auto it = selector.begin(); it != selector.end(); ++it) {
    if (it.key() == "block" || it.key() == "device_index") continue;
    const json& axes = point.value("axes", json::object());
    if (!axes.contains(it.key()) || axes[it.key()] != it.value()) return false;
  }
  return true;
}

std::vector<const json*> matched(const json& selector, const json& points) {
  std::vector<const json*> out;
  for (const json& p : points)
    if (matches(selector, p)) out.push_back(&p);
  return out;
}

bool ok(const json& p) { return p.value("outcome", json::object()).value("status", "") == "ok"; }

// The metric of one point, or a negative number when it has none. device_index >= 0: a
// peak of that device alone (the point's devices in name order), else the largest.
double metric_of(const json& p, const std::string& metric, int device_index) {
  if (metric == "ok") return ok(p) ? 1.0 : 0.0;
  if (!ok(p)) return -1;
  const json& m = p.value("metrics", json::object());
  if (metric == "step_time") {
    const json v = m.value("step_time_s", json::object()).value("median", json());
    return v.is_number() && v.get<double>() > 0 ? v.get<double>() : -1;
  }
  if (metric == "peak_allocated" || metric == "peak_reserved") {
    const std::string key = metric == "peak_allocated" ? "allocated_bytes.all.peak" : "reserved_bytes.all.peak";
    double peak = -1;
    const json devices = p.value("memory", json::object()).value("devices", json::object());
    int index = 0;
    for (const auto& [dev, stats] : devices.items()) {
      const bool counted = device_index < 0 || index++ == device_index;
      if (counted && stats.contains(key) && stats[key].is_number()) peak = std::max(peak, stats[key].get<double>());
    }
    return peak;
  }
  const json* j = &m;   // "metrics.a.b"
  for (size_t pos = 8; pos <= metric.size();) {
    const size_t dot = std::min(metric.find('.', pos), metric.size());
    const std::string key = metric.substr(pos, dot - pos);
    if (!j->is_object() || !j->contains(key)) return -1;
    j = &(*j)[key];
    pos = dot + 1;
  }
  return j->is_number() ? j->get<double>() : -1;
}

struct Measured {
  Interval interval;
  std::vector<std::string> failed;
  std::string unit;   // "x" for a ratio, else the metric's
};

Measured measure(const json& claim, const json& points) {
  const std::string metric = claim["metric"];
  const bool ratio = claim.contains("base");
  const auto other = matched(claim["other"], points);
  const auto base = ratio ? matched(claim["base"], points) : std::vector<const json*>{};
  Measured m;
  m.unit = ratio ? "x" : metric == "step_time" ? " s" : metric.rfind("peak", 0) == 0 ? " B" : "";
  std::vector<double> a, b;
  const size_t n = ratio ? std::min(other.size(), base.size()) : other.size();
  for (size_t i = 0; i < n; ++i) {
    const double va = metric_of(*other[i], metric, claim["other"].value("device_index", -1));
    const double vb = ratio ? metric_of(*base[i], metric, claim["base"].value("device_index", -1)) : 1.0;
    if (va < 0 || vb <= 0) {
      m.failed.push_back(va < 0 ? (*other[i])["name"].get<std::string>() : (*base[i])["name"].get<std::string>());
      continue;
    }
    a.push_back(va);
    b.push_back(vb);
  }
  if (a.empty()) return m;
  if (metric == "step_time") m.interval = ratio ? paired_ratio(a, b) : seed_mean(a, kMinTimingPairs);
  else m.interval = exact(a[0] / b[0]);
  return m;
}

Judged judge(const json& claim, const Interval& i) {
  if (claim.contains("below")) return judge_threshold(i, claim["below"].get<double>(), false);
  if (claim.contains("above")) return judge_threshold(i, claim["above"].get<double>(), true);
  return judge_within(i, claim["within"][0].get<double>(), claim["within"][1].get<double>());
}

std::string bound_text(const json& claim) {
  if (claim.contains("below")) return str_cat("below ", claim["below"].dump());
  if (claim.contains("above")) return str_cat("above ", claim["above"].dump());
  return str_cat("within [", claim["within"][0].dump(), ", ", claim["within"][1].dump(), "]");
}

std::string value_text(const Measured& m, const std::string& metric) {
  if (m.interval.n == 0) return "no value (no point of the claim finished)";
  if (metric == "step_time") return interval_text(m.interval, m.unit == "x" ? "pairs" : "runs", m.unit == "x" ? 1 : 1e3,
                                                  m.unit == "x" ? "x" : " ms", m.unit == "x" ? 3 : 1);
  if (m.unit == " B") return interval_text(m.interval, "point", 1.0 / (1 << 30), " GiB", 3);
  return interval_text(m.interval, "point", 1.0, m.unit.c_str(), 3);
}

void check_selector(const json& sel, const std::set<std::string>& blocks, const std::string& what) {
  OOMLAB_CHECK(sel.is_object() && sel.contains("block") && sel["block"].is_string(), what,
               " must be an object naming a \"block\"");
  OOMLAB_CHECK(blocks.count(sel["block"].get<std::string>()), what, ": the gpu profile has no block '",
               sel["block"].get<std::string>(), "'");
  OOMLAB_CHECK(!sel.contains("device_index") || sel["device_index"].is_number_unsigned(), what,
               ": \"device_index\" must be a device's index (0, 1, ...)");
}
}  // namespace

void check_gpu_claims(const json& spec, const std::vector<PointSpec>& points, const std::string& where) {
  if (!spec.contains("gpu_claims")) return;
  const json& claims = spec["gpu_claims"];
  OOMLAB_CHECK(claims.is_array(), where, ": \"gpu_claims\" must be a list");
  std::set<std::string> blocks;
  for (const PointSpec& p : points) blocks.insert(p.block);
  for (size_t i = 0; i < claims.size(); ++i) {
    const json& c = claims[i];
    const std::string what = str_cat(where, ": gpu_claims[", i, "]");
    OOMLAB_CHECK(c.is_object() && c.contains("name") && c["name"].is_string() && c.contains("metric") &&
                     c["metric"].is_string() && c.contains("other"),
                 what, " needs \"name\", \"metric\" and \"other\"");
    for (auto it = c.begin(); it != c.end(); ++it)
      OOMLAB_CHECK(std::find(std::begin(kClaimKeys), std::end(kClaimKeys), it.key()) != std::end(kClaimKeys), what,
                   ": unknown key \"", it.key(), "\"");
    OOMLAB_CHECK(known_metric(c["metric"]), what, ": unknown metric '", c["metric"].get<std::string>(),
                 "' (step_time, peak_allocated, peak_reserved, ok, metrics.NAME)");
    check_selector(c["other"], blocks, what + ".other");
    if (c.contains("base")) check_selector(c["base"], blocks, what + ".base");
    const int bounds = int(c.contains("below")) + int(c.contains("above")) + int(c.contains("within"));
    OOMLAB_CHECK(bounds == 1, what, ": give exactly one of \"below\", \"above\", \"within\"");
    for (const char* k : {"below", "above"})
      OOMLAB_CHECK(!c.contains(k) || c[k].is_number(), what, ": \"", k, "\" must be a number");
    OOMLAB_CHECK(!c.contains("within") || (c["within"].is_array() && c["within"].size() == 2 &&
                                           c["within"][0].is_number() && c["within"][1].is_number()),
                 what, ": \"within\" must be [lo, hi]");
  }
}

json gpu_claims_summary(const json& spec, const json& points, const std::string& device) {
  const bool on_gpu = parse_device(device).type == DeviceType::cuda;
  json out = json::array();
  for (const json& c : spec.value("gpu_claims", json::array())) {
    const Measured m = measure(c, points);
    const Judged j = on_gpu ? judge(c, m.interval) : Judged::pending_gpu;
    json row = interval_json(m.interval);
    row.update({{"name", c["name"]}, {"metric", c["metric"]}, {"bound", bound_text(c)}, {"judged", judged_name(j)},
                {"failed_points", m.failed},
                {"text", str_cat(c["name"].get<std::string>(), ": ", value_text(m, c["metric"]), ", claimed ",
                                 bound_text(c), ": ", judged_name(j))}});
    out.push_back(row);
  }
  return {{"device", device}, {"on_gpu", on_gpu}, {"claims", out}};
}

json gpu_claims_verdict(const json& summary) {
  std::vector<Judged> parts;
  std::string reason;
  for (const json& c : summary["claims"]) {
    const std::string j = c["judged"];
    for (Judged k : {Judged::holds, Judged::fails, Judged::noise, Judged::too_few, Judged::pending_gpu})
      if (j == judged_name(k)) parts.push_back(k);
    reason += (reason.empty() ? "" : "; ") + c["text"].get<std::string>();
  }
  if (!summary["on_gpu"].get<bool>())
    reason = str_cat("The gpu profile ran on ", summary["device"].get<std::string>(),
                     ", which measures no GPU (a dry run of the profile): every GPU claim stays pending. ", reason);
  if (parts.empty()) return {{"status", "inconclusive"}, {"reason", "The spec declares no gpu_claims."}};
  return {{"status", verdict_status(parts)}, {"reason", reason + "."}};
}

}  // namespace oomlab
