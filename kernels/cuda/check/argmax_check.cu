// argmax_check.cu — a CPU-only run of loss.cu's row argmax (argmax_row.cuh, the count_correct
// kernel): 32 emulated lanes scan a row as the warp does, then
// the shuffle tree merges them with __shfl_down_sync's rule (a lane whose partner is past lane
// 31 gets its own value back), and lane 0's index must be the host rule's (kernels/loss.h
// count_correct_rows: torch.argmax, NaN the maximum, the first index among equals). Rows: random,
// with ties, NaNs, +-inf and signed zeros placed in every lane, shorter than a warp, empty.
// Built as `cuda_argmax_check` in CUDA builds and run by ctest; exits 1 on a mismatch.
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/argmax_row.cuh"
#include "kernels/loss.h"

using namespace oomlab;
namespace am = oomlab::argmax_row;

namespace {
// The warp's answer for one row: lane_best per lane, then offsets 16, 8, 4, 2, 1.
long long warp_argmax(const std::vector<double>& row) {
  const int64_t C = int64_t(row.size());
  std::array<am::Best, 32> lanes;
  for (int l = 0; l < 32; ++l) lanes[size_t(l)] = am::lane_best(l, C, [&](int64_t j) { return row[size_t(j)]; });
  for (int o = 16; o > 0; o >>= 1) {
    std::array<am::Best, 32> next = lanes;   // every lane reads its partner's value before any writes
    for (int l = 0; l < 32; ++l) next[size_t(l)] = am::merge(lanes[size_t(l)], lanes[size_t(l + o < 32 ? l + o : l)]);
    lanes = next;
  }
  return lanes[0].j;
}

long long host_argmax(const std::vector<double>& row) {   // count_correct_rows on one row, per label
  for (int64_t label = 0; label < int64_t(row.size()); ++label)
    if (count_correct_rows(1, int64_t(row.size()), 0, 1, &label, 0, [&](int64_t k) { return row[size_t(k)]; }) == 1)
      return label;
  return -1;
}
}  // namespace

int main() {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<std::vector<double>> rows = {{}, {5}, {nan}, {1, nan, nan, 2}, {-inf, -inf}, {0.0, -0.0, 0.0},
                                           {3, 1, 3}, {inf, 1, inf, nan}};
  const double specials[] = {nan, inf, -inf, 2.0, -0.0};
  for (int64_t C : {7, 31, 32, 33, 64, 100, 1000}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<double> row(static_cast<size_t>(C));
      for (double& v : row) v = std::round(u(rng) * 3) / 3;   // few distinct values: many ties
      const int extra = trial % 4;  // 0-3 specials at random places (every lane over the trials)
      for (int e = 0; e < extra; ++e) row[size_t(rng() % uint64_t(C))] = specials[rng() % 5];
      rows.push_back(row);
    }
  }
  int failures = 0;
  for (const auto& row : rows) {
    const long long want = row.empty() ? -1 : host_argmax(row), got = warp_argmax(row);
    if (got != want) {
      if (failures++ < 5) std::printf("FAIL row of %zu: warp %lld, host %lld\n", row.size(), got, want);
    }
  }
  std::printf("%s: count_correct's warp argmax (argmax_row.cuh) on emulated lanes vs the host rule, %zu rows "
              "(%d failure%s)\n", failures ? "FAIL" : "ok", rows.size(), failures, failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
