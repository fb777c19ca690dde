// bn_math.cuh — the per-channel statistics of batchnorm.cu's one-pass training forward
// (issue 31; float32 and 16-bit inputs), host and device, so
// kernels/cuda/check/formula_check.cu can hold it against the CPU's two-pass statistics.
// One read of x gives shifted sums s1 = sum(x - K), s2 = sum((x - K)^2) in double, K the
// channel's first element (every block reads the same one); then
//   mean = K + s1 / M,  ssd = max(s2 - s1^2 / M, 0),  var = ssd / M (biased), ssd / (M - 1).
// The shift keeps the subtraction from cancelling: with K inside the data, the relative
// error of var is about 1e-16 * ((mean - K)^2 / var + 1), far below float32 rounding
// unless a channel's spread is under 1e-8 of its distance from K.
#pragma once
#include <cstdint>

namespace oomlab::cuda {

struct ShiftedStats {
  double mean, var, var_unbiased;   // var divided by M, var_unbiased by M - 1
};

__host__ __device__ inline ShiftedStats stats_from_shifted_sums(double K, double s1, double s2, int64_t M) {
  const double m1 = s1 / double(M);
  double ssd = s2 - s1 * m1;   // the sum of squared deviations from the mean
  if (ssd < 0.0) ssd = 0.0;
  return {K + m1, ssd / double(M), ssd / double(M - 1)};
}

}  // namespace oomlab::cuda
