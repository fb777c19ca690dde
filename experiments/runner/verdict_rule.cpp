// verdict_rule.cpp — the shared verdict rule (verdict_rule.h).
#include "experiments/runner/verdict_rule.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/core/error.h"

namespace oomlab {

double t_quantile_975(double df) {
  static const double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                 2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                 2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  OOMLAB_CHECK(df >= 1, "t_quantile_975: degrees of freedom must be >= 1, got ", df);
  if (df >= 30) return 1.96 + 2.46 / df;   // within 0.003 of the exact quantile for df >= 30
  // Welch's df is fractional: interpolate between the integer rows.
  const int lo = int(std::floor(df));
  const double f = df - lo;
  return table[lo - 1] + f * (table[std::min(lo, 29)] - table[lo - 1]);
}

namespace {

// Mean and 95% t interval of v (the observed range when too few).
Interval t_interval(const std::vector<double>& v, int min_n) {
  Interval r;
  r.n = int(v.size());
  if (v.empty()) return r;
  double mean = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  r.estimate = mean;
  r.enough = r.n >= min_n && r.n >= 2;
  if (r.n < 2) { r.lo = r.hi = mean; return r; }
  if (!r.enough) {
    r.lo = *std::min_element(v.begin(), v.end());
    r.hi = *std::max_element(v.begin(), v.end());
    return r;
  }
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  const double half = t_quantile_975(r.n - 1) * std::sqrt(ss / double(r.n - 1) / double(r.n));
  r.lo = mean - half;
  r.hi = mean + half;
  return r;
}

double variance(const std::vector<double>& v, double mean) {
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return v.size() > 1 ? ss / double(v.size() - 1) : 0.0;
}

}  // namespace

Interval paired_ratio(const std::vector<double>& a, const std::vector<double>& b, int min_pairs) {
  OOMLAB_CHECK(a.size() == b.size(), "paired_ratio: ", a.size(), " runs of A but ", b.size(), " of B");
  std::vector<double> logs;
  for (size_t i = 0; i < a.size(); ++i) {
    OOMLAB_CHECK(a[i] > 0 && b[i] > 0, "paired_ratio: timings must be positive (pair ", i, ": ", a[i], ", ", b[i], ")");
    logs.push_back(std::log(a[i] / b[i]));
  }
  Interval l = t_interval(logs, min_pairs);
  return {std::exp(l.estimate), std::exp(l.lo), std::exp(l.hi), l.n, l.enough};
}

Interval seed_mean(const std::vector<double>& v, int min_seeds) { return t_interval(v, min_seeds); }

Interval mean_difference(const std::vector<double>& a, const std::vector<double>& b, int min_seeds) {
  Interval r;
  r.n = int(std::min(a.size(), b.size()));
  if (a.empty() || b.empty()) return r;
  const Interval ma = t_interval(a, 1), mb = t_interval(b, 1);
  r.estimate = ma.estimate - mb.estimate;
  r.enough = int(a.size()) >= std::max(min_seeds, 2) && int(b.size()) >= std::max(min_seeds, 2);
  if (!r.enough) {   // the range of differences the runs allow
    r.lo = *std::min_element(a.begin(), a.end()) - *std::max_element(b.begin(), b.end());
    r.hi = *std::max_element(a.begin(), a.end()) - *std::min_element(b.begin(), b.end());
    return r;
  }
  const double va = variance(a, ma.estimate) / double(a.size()), vb = variance(b, mb.estimate) / double(b.size());
  const double se = std::sqrt(va + vb);
  // Welch-Satterthwaite degrees of freedom; identical runs (se 0) give a zero-width interval.
  const double df = se > 0 ? (va + vb) * (va + vb) /
                                 (va * va / double(a.size() - 1) + vb * vb / double(b.size() - 1))
                           : 1.0;
  const double half = t_quantile_975(std::max(1.0, df)) * se;
  r.lo = r.estimate - half;
  r.hi = r.estimate + half;
  return r;
}

Interval exact(double v) { return {v, v, v, 1, true}; }

const char* judged_name(Judged j) {
  switch (j) {
    case Judged::holds: return "holds";
    case Judged::fails: return "fails";
    case Judged::noise: return "inside the noise";
    case Judged::too_few: return "too few runs";
    case Judged::pending_gpu: return "pending GPU";
  }
  return "?";
}

Judged judge_threshold(const Interval& i, double threshold, bool above_is_claim) {
  if (!i.enough) return Judged::too_few;
  if (i.lo > threshold) return above_is_claim ? Judged::holds : Judged::fails;
  if (i.hi < threshold) return above_is_claim ? Judged::fails : Judged::holds;
  if (i.lo == i.hi) return above_is_claim ? Judged::fails : Judged::holds;   // exact, on the threshold
  return Judged::noise;
}

Judged judge_within(const Interval& i, double lo, double hi) {
  if (!i.enough) return Judged::too_few;
  if (i.lo >= lo && i.hi <= hi) return Judged::holds;
  if (i.hi < lo || i.lo > hi) return Judged::fails;
  return Judged::noise;
}

std::string verdict_status(const std::vector<Judged>& parts) {
  auto has = [&](Judged j) { return std::find(parts.begin(), parts.end(), j) != parts.end(); };
  if (parts.empty()) return "inconclusive";
  const bool holds = has(Judged::holds), fails = has(Judged::fails);
  if (fails) return holds ? "depends" : "refuted";
  if (has(Judged::noise) || has(Judged::too_few)) return "inconclusive";
  if (has(Judged::pending_gpu)) return "pending GPU";
  return "confirmed";
}

nlohmann::json interval_json(const Interval& i) {
  return {{"estimate", i.estimate}, {"lo", i.lo}, {"hi", i.hi}, {"n", i.n}, {"enough", i.enough}};
}

Interval interval_from_json(const nlohmann::json& j) {
  return {j.at("estimate").get<double>(), j.at("lo").get<double>(), j.at("hi").get<double>(), j.at("n").get<int>(),
          j.at("enough").get<bool>()};
}

std::string interval_text(const Interval& i, const char* what_n, double scale, const char* unit, int decimals) {
  std::string what = what_n;   // a plural noun: "1 seed", "5 seeds"
  if (i.n == 1 && what.size() > 1 && what.back() == 's') what.pop_back();
  what_n = what.c_str();
  char buf[200];
  if (i.n < 2)
    std::snprintf(buf, sizeof buf, "%.*f%s (%d %s: no interval)", decimals, i.estimate * scale, unit, i.n, what_n);
  else
    std::snprintf(buf, sizeof buf, "%.*f%s (%s %.*f-%.*f, %d %s)", decimals, i.estimate * scale, unit,
                  i.enough ? "95% CI" : "range", decimals, i.lo * scale, decimals, i.hi * scale, i.n, what_n);
  return buf;
}

}  // namespace oomlab
