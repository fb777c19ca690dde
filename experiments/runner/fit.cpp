// fit.cpp — least-squares fits (fit.h).
#include "experiments/runner/fit.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace oomlab {

LinearFit linear_fit(const std::vector<double>& x, const std::vector<double>& y) {
  LinearFit f;
  size_t n = x.size();
  if (n < 2) { f.intercept = n ? y[0] : 0; return f; }
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) { mx += x[i]; my += y[i]; }
  mx /= double(n); my /= double(n);
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (x[i] - mx) * (x[i] - mx); sxy += (x[i] - mx) * (y[i] - my); syy += (y[i] - my) * (y[i] - my);
  }
  f.slope = sxx > 0 ? sxy / sxx : 0;
  f.intercept = my - f.slope * mx;
  double ss_res = 0;
  for (size_t i = 0; i < n; ++i) { double e = y[i] - (f.intercept + f.slope * x[i]); ss_res += e * e; }
  f.r2 = syy > 0 ? 1.0 - ss_res / syy : 1.0;
  return f;
}

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

}  // namespace oomlab
