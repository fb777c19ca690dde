// cost_model.cpp — the alpha-beta all-reduce model (cost_model.h).
#include "engine/parallel/cost_model.h"

#include <array>
#include <cmath>
#include <set>

namespace oomlab {

double all_reduce_steps(AllReduceAlgo, int ranks) { return ranks > 1 ? 2.0 * (ranks - 1) : 0.0; }

double bottleneck_bytes(AllReduceAlgo algo, int ranks, double bytes) {
  if (ranks <= 1) return 0;
  return algo == AllReduceAlgo::ring ? 2.0 * (ranks - 1) / ranks * bytes : double(ranks - 1) * bytes;
}

double predict_us(const CollectiveCost& c, AllReduceAlgo algo, int ranks, double bytes) {
  return c.fixed_us + c.alpha_us * all_reduce_steps(algo, ranks) +
         c.beta_us_per_byte * bottleneck_bytes(algo, ranks, bytes);
}

namespace {
// Solves the m x m normal equations (m <= 3) by Gaussian elimination; false when singular.
template <size_t M> bool solve(std::array<std::array<double, M + 1>, M> a, std::array<double, M>& x) {
  for (size_t c = 0; c < M; ++c) {
    size_t piv = c;
    for (size_t r = c + 1; r < M; ++r) if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    if (std::abs(a[piv][c]) < 1e-12 * (1 + std::abs(a[c][c]))) return false;
    std::swap(a[c], a[piv]);
    for (size_t r = 0; r < M; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (size_t k = c; k <= M; ++k) a[r][k] -= f * a[c][k];
    }
  }
  for (size_t c = 0; c < M; ++c) x[c] = a[c][M] / a[c][c];
  return true;
}

// Least squares of y on the regressors (each row: features), with columns scaled to 1.
template <size_t M> std::array<double, M> least_squares(const std::vector<std::array<double, M>>& f,
                                                        const std::vector<double>& y) {
  std::array<double, M> scale{};
  for (const auto& row : f) for (size_t j = 0; j < M; ++j) scale[j] = std::max(scale[j], std::abs(row[j]));
  for (double& s : scale) s = s > 0 ? s : 1;
  std::array<std::array<double, M + 1>, M> a{};
  for (size_t i = 0; i < f.size(); ++i)
    for (size_t j = 0; j < M; ++j) {
      for (size_t k = 0; k < M; ++k) a[j][k] += f[i][j] / scale[j] * f[i][k] / scale[k];
      a[j][M] += f[i][j] / scale[j] * y[i];
    }
  std::array<double, M> x{};
  if (!solve<M>(a, x)) return {};
  for (size_t j = 0; j < M; ++j) x[j] /= scale[j];
  return x;
}
}  // namespace

CollectiveCost fit_cost(AllReduceAlgo algo, const std::vector<CostSample>& samples) {
  CollectiveCost c;
  std::vector<double> y;
  std::set<int> ranks;
  for (const CostSample& s : samples) {
    if (s.ranks < 2) continue;
    y.push_back(s.time_us);
    ranks.insert(s.ranks);
  }
  c.samples = int(y.size());
  if (y.size() < 2) return c;
  if (ranks.size() >= 3) {
    std::vector<std::array<double, 3>> f;
    for (const CostSample& s : samples)
      if (s.ranks >= 2) f.push_back({1.0 / s.time_us, all_reduce_steps(algo, s.ranks) / s.time_us,
                                     bottleneck_bytes(algo, s.ranks, s.bytes) / s.time_us});
    const auto x = least_squares<3>(f, std::vector<double>(y.size(), 1.0));
    c.fixed_us = x[0], c.alpha_us = x[1], c.beta_us_per_byte = x[2];
    if (c.fixed_us < 0) {   // no negative call cost: the latency term alone, through the origin
      std::vector<std::array<double, 2>> g;
      for (const auto& row : f) g.push_back({row[1], row[2]});
      const auto z = least_squares<2>(g, std::vector<double>(y.size(), 1.0));
      c.fixed_us = 0, c.alpha_us = z[0], c.beta_us_per_byte = z[1];
    }
  } else {
    std::vector<std::array<double, 2>> f;
    for (const CostSample& s : samples)
      if (s.ranks >= 2) f.push_back({1.0 / s.time_us, bottleneck_bytes(algo, s.ranks, s.bytes) / s.time_us});
    const auto x = least_squares<2>(f, std::vector<double>(y.size(), 1.0));
    c.fixed_us = x[0], c.beta_us_per_byte = x[1];
  }
  double mean = 0, ss_tot = 0, ss_res = 0;   // r2 of log time (the fit is in relative error)
  for (double& v : y) v = std::log(v);
  for (double v : y) mean += v / double(y.size());
  size_t i = 0;
  for (const CostSample& s : samples) {
    if (s.ranks < 2) continue;
    ss_tot += (y[i] - mean) * (y[i] - mean);
    const double e = y[i] - std::log(std::max(1e-9, predict_us(c, algo, s.ranks, s.bytes)));
    ss_res += e * e;
    ++i;
  }
  c.r2 = ss_tot > 0 ? 1 - ss_res / ss_tot : 1;
  return c;
}

}  // namespace oomlab
