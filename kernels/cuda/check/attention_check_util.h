// attention_check_util.h — what the attention kernel checks (attention_kernels_check.cu,
// attention_tc_check.cu, attention_mma_check.cu) share: their cases (the tensor-core checks'
// list too), the inputs' arguments and output buffers, the CPU kernels' run that is the
// reference, the comparison against it, counted into the program's failures, and the launch
// of an emulated grid.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/dispatch.h"
#include "kernels/attention.h"

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

struct Case {
  std::string name;
  int64_t B, NH, Tq, Tk;
  double p;
  bool causal;
  std::vector<uint8_t> mask;   // [B, Tk] or empty
  int64_t D = 64, Dv = 64;     // the flash and tensor-core kernels take 64 only; the tiled ones up to 128
};

// The tensor-core checks' cases (head dims 64): partial tiles, padding (a fully padded batch
// too), dropout, causal, Tq != Tk.
inline std::vector<Case> tensor_core_cases() {
  return {{"one partial tile", 1, 1, 16, 16, 0.0, false, {}},
          {"partial tiles, padding", 2, 2, 70, 100, 0.0, false, padded_tail(2, 100, {90, 37})},
          {"a batch all padded", 2, 1, 33, 65, 0.0, false, padded_tail(2, 65, {60, 0})},
          {"dropout 0.1", 1, 2, 70, 96, 0.1, false, padded_tail(1, 96, {80})},
          {"causal", 1, 2, 130, 130, 0.0, true, {}},
          {"causal, dropout, Tq < Tk", 2, 1, 64, 97, 0.2, true, padded_tail(2, 97, {97, 90})}};
}

// A case's arguments on q, k, v and dO (the outputs unset), scale 1/sqrt(D).
inline FusedAttentionArgs case_args(const Case& c, const std::vector<float>& q, const std::vector<float>& k,
                                    const std::vector<float>& v, const std::vector<float>& g) {
  return FusedAttentionArgs{q.data(), k.data(), v.data(), c.mask.empty() ? nullptr : c.mask.data(), nullptr, nullptr,
                            g.data(), nullptr, nullptr, nullptr, c.B * c.NH, c.NH, c.Tq, c.Tk, c.D, c.Dv,
                            1.0 / std::sqrt(double(c.D)), c.p, 0x5eedull, 0x1000ull, c.causal};
}

// The outputs of one run (forward: out, lse; backward: dq, dk, dv).
struct Buffers {
  std::vector<float> out, lse, dq, dk, dv;
  explicit Buffers(const FusedAttentionArgs& a)
      : out(size_t(a.BH * a.Tq * a.Dv)), lse(size_t(a.BH * a.Tq)), dq(size_t(a.BH * a.Tq * a.D)),
        dk(size_t(a.BH * a.Tk * a.D)), dv(size_t(a.BH * a.Tk * a.Dv)) {}
  void point(FusedAttentionArgs& a) {
    a.out = out.data(); a.lse = lse.data(); a.dq = dq.data(); a.dk = dk.data(); a.dv = dv.data();
  }
};

// The reference: the CPU kernels (kernels/cpu/attention_cpu.cpp) forward and backward on `a`.
inline Buffers cpu_reference(FusedAttentionArgs a) {
  Buffers want(a);
  want.point(a);
  fused_attention_forward_kernels().launch(cpu_device(), DType::f32, a);
  fused_attention_backward_kernels().launch(cpu_device(), DType::f32, a);
  return want;
}

// Every output of `got` against `want`: lse within lse_bar, the others within bar.
inline void expect_buffers(const std::string& what, const Buffers& got, const Buffers& want, double bar,
                           double lse_bar) {
  expect_close(what, "out", got.out, want.out, bar);
  expect_close(what, "lse", got.lse, want.lse, lse_bar);
  expect_close(what, "dq", got.dq, want.dq, bar);
  expect_close(what, "dk", got.dk, want.dk, bar);
  expect_close(what, "dv", got.dv, want.dv, bar);
}

inline uint32_t threshold(double p) { return uint32_t(std::ceil(p * 16777216.0)); }   // the kernels' dropout rule

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
