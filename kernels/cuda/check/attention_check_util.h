// attention_check_util.h — what the attention kernel checks (attention_kernels_check.cu,
// attention_tc_check.cu, attention_mma_check.cu) share: the comparison against the CPU
// kernels' outputs, counted into the program's failures, the padding masks of their cases,
// and the launch of an emulated grid.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace oomlab::attention_check {

inline int failures = 0;

// got within `bar` of want, relative to want's largest finite magnitude; -inf where want is
// -inf exactly. Prints the worst element either way.
inline void expect_close(const std::string& what, const char* name, const std::vector<float>& got,
                         const std::vector<float>& want, double bar) {
  double scale = 1e-30, worst = 0;
  size_t at = 0;
  for (float w : want)
    if (std::isfinite(w)) scale = std::max(scale, double(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    const bool same_inf = std::isinf(want[i]) && got[i] == want[i];
    const double err = same_inf ? 0.0 : std::fabs(double(got[i]) - double(want[i])) / scale;
    if (!(err <= worst)) worst = err, at = i;   // NaN counts as the worst
  }
  const bool ok = worst <= bar;
  if (!ok) ++failures;
  std::printf("%s %-40s %-3s worst %.3g at %zu (got %.9g want %.9g)\n", ok ? "ok  " : "FAIL", what.c_str(), name, worst,
              at, double(got[at]), double(want[at]));
}

// A [B, Tk] key padding mask: batch b keeps its first kept[b] keys.
inline std::vector<uint8_t> padded_tail(int64_t B, int64_t Tk, const std::vector<int64_t>& kept) {
  std::vector<uint8_t> m(size_t(B * Tk), 0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = kept[size_t(b)]; j < Tk; ++j) m[size_t(b * Tk + j)] = 1;
  return m;
}

// Every block of a gx x gy grid in turn: `threads` host threads running
// body(t, bx, by, block, smem) on a fresh Block (the emulation's barrier and exchanges) and Smem.
template <class Block, class Smem, class Body> void run_blocks(int64_t gx, int64_t gy, int threads, Body body) {
  for (int64_t by = 0; by < gy; ++by)
    for (int64_t bx = 0; bx < gx; ++bx) {
      auto block = std::make_unique<Block>();
      auto smem = std::make_unique<Smem>();
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { body(t, bx, by, *block, *smem); });
      for (auto& th : pool) th.join();
    }
}

}  // namespace oomlab::attention_check
