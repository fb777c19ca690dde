// fit.h — least-squares fits the experiment drivers use on measured series.
#pragma once
#include <vector>

namespace oomlab {

struct LinearFit { double intercept = 0, slope = 0, r2 = 1; };
// y = intercept + slope * x; with fewer than 2 points: intercept = y[0] (or 0), slope 0.
LinearFit linear_fit(const std::vector<double>& x, const std::vector<double>& y);

// y = c0 + c1*x + c2*x^2 (x scaled by its maximum for conditioning); returns {c0, c1, c2}
// in unscaled units, or empty with fewer than 3 distinct x.
std::vector<double> quadratic_fit(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace oomlab
