// bn_stats_check.cu — a CPU-only check of batchnorm.cu's one-pass training statistics
// (bn_math.cuh, float32 and 16-bit inputs): the one-pass algorithm, emulated on
// the host with the kernel's split structure (channel_splits: per-split shifted sums in
// double, added in split order, then stats_from_shifted_sums), against the CPU kernel's
// two-pass statistics (kernels/cpu/batchnorm_cpu.cpp) on float32 data, including hostile
// channels: a mean 1e6 times the spread, a first element (the shift K) far out in the tail,
// a constant channel. Within a channel's positions the GPU adds per thread and then in a
// tree, the emulation in order; both are double sums of float32 data, so they differ by
// about 1e-16 relative, which the float32 results absorb. Bar: save_mean, save_invstd,
// running_mean, running_var and y within 1 float32 ulp of the CPU's. (float64 inputs keep
// the two-pass kernels: a shift far from the mean costs digits a float64 result would show.)
// Built as `cuda_bn_stats_check` in CUDA builds and run by ctest; exits 1 on a mismatch.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <random>
#include <vector>

#include "engine/core/dispatch.h"
#include "kernels/batchnorm.h"
#include "kernels/cuda/bn_math.cuh"
#include "kernels/cuda/dense_common.cuh"   // channel_splits: the kernel's own split rule

using namespace oomlab;

namespace {
int failures = 0;

struct Emulated { std::vector<float> mean, invstd, rm, rv, y; };

Emulated one_pass(const std::vector<float>& x, int64_t N, int64_t C, int64_t HW, double eps, double mom,
                  const std::vector<float>& w, const std::vector<float>& b, std::vector<float> rm,
                  std::vector<float> rv) {
  const int64_t M = N * HW, S = cuda::dense::channel_splits(M, C), chunk = (M + S - 1) / S;
  Emulated e{std::vector<float>(C), std::vector<float>(C), {}, {}, std::vector<float>(x.size())};
  for (int64_t c = 0; c < C; ++c) {
    const double K = x[c * HW];
    double s1 = 0, s2 = 0;
    for (int64_t s = 0; s < S; ++s) {
      double p1 = 0, p2 = 0;
      for (int64_t m = s * chunk; m < std::min(M, (s + 1) * chunk); ++m) {
        const double d = double(x[(m / HW * C + c) * HW + m % HW]) - K;
        p1 += d;
        p2 += d * d;
      }
      s1 += p1;
      s2 += p2;
    }
    const cuda::ShiftedStats st = cuda::stats_from_shifted_sums(K, s1, s2, M);
    const double invstd = 1.0 / std::sqrt(st.var + eps);
    e.mean[c] = float(st.mean);
    e.invstd[c] = float(invstd);
    rm[c] = float((1.0 - mom) * double(rm[c]) + mom * st.mean);
    rv[c] = float((1.0 - mom) * double(rv[c]) + mom * st.var_unbiased);
    const double sc = double(w[c]) * invstd;
    const float scale = float(sc), shift = float(double(b[c]) - st.mean * sc);
    for (int64_t m = 0; m < M; ++m) {
      const int64_t o = (m / HW * C + c) * HW + m % HW;
      e.y[o] = std::fma(x[o], scale, shift);
    }
  }
  e.rm = rm;
  e.rv = rv;
  return e;
}

int64_t ulps(float a, float b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b)) return INT64_MAX;
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return std::llabs(int64_t(ia) - int64_t(ib));
}

void expect_close(const char* what, const char* field, const std::vector<float>& cpu, const std::vector<float>& emu) {
  int64_t worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < cpu.size(); ++i)
    if (ulps(cpu[i], emu[i]) > worst) { worst = ulps(cpu[i], emu[i]); at = i; }
  if (worst > 1) {
    ++failures;
    printf("FAIL %-28s %-12s %lld ulps at %zu: cpu %.9g one-pass %.9g\n", what, field, (long long)worst, at,
           double(cpu[at]), double(emu[at]));
  } else {
    printf("ok   %-28s %-12s max %lld ulp over %zu values\n", what, field, (long long)worst, cpu.size());
  }
}

void check(const char* what, int64_t N, int64_t C, int64_t HW, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, 1.0);
  const double means[] = {0.0, 1e3, -50.0, 0.0, 7.0}, spreads[] = {1.0, 1e-3, 10.0, 1.0, 0.0};
  std::vector<float> x(size_t(N * C * HW)), w(C), b(C), rm(C, 0.1f), rv(C, 0.9f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i) x[(n * C + c) * HW + i] = float(means[c % 5] + spreads[c % 5] * z(rng));
  for (int64_t c = 3; c < C; c += 5) x[c * HW] = 1e4f;   // the shift K far out in the tail
  for (int64_t c = 0; c < C; ++c) { w[c] = float(0.5 + 0.1 * c); b[c] = float(0.05 * c); }
  const double eps = 1e-5, mom = 0.1;
  const Emulated e = one_pass(x, N, C, HW, eps, mom, w, b, rm, rv);
  std::vector<float> y(x.size()), sm(C), si(C);
  BatchNormArgs a{N, C, HW, mom, eps, true, x.data(), w.data(), b.data(), y.data(), rm.data(), rv.data(),
                  sm.data(), si.data(), nullptr, nullptr, nullptr, nullptr};
  batch_norm_forward_kernels().launch(cpu_device(), DType::f32, a);
  expect_close(what, "save_mean", sm, e.mean);
  expect_close(what, "save_invstd", si, e.invstd);
  expect_close(what, "running_mean", rm, e.rm);
  expect_close(what, "running_var", rv, e.rv);
  expect_close(what, "y", y, e.y);
}
}  // namespace

int main() {
  ensure_kernels_registered();
  check("one split (N8 C5 HW61)", 8, 5, 61, 1);
  check("16 splits (N64 C2 HW1024)", 64, 2, 1024, 2);
  check("many channels (N4 C10 HW9)", 4, 10, 9, 3);
  printf("%d failures\n", failures);
  return failures != 0;
}
