// attention_kernels_check.cu — a CPU-only run of the CUDA fused-attention kernels written for an
// executor context: the register-tiled ones (attention_flash.cuh, behind
// OOMLAB_CUDA_FLASH_ATTENTION) and the shared-memory tiled ones (attention_tiled.cuh, the
// default; head dims up to 128) against the CPU kernels
// (kernels/cpu/attention_cpu.cpp): the kernels' own bodies, executed by a host emulation of
// each thread block (HostCtx: 128 host threads, a std::barrier for __syncthreads, an exchange
// array for the 8-lane shuffles), block by block over the launch grid, with the launch
// configuration attention_flash.cu uses. So every index, tile bound, mask, dropout draw and
// causal skip the GPU will run is exercised here, on machines without a GPU (CI included).
// What this cannot show: shared-memory limits, the GPU's expf / logf (within an ulp or two of
// glibc's), warp scheduling. Bar: out, lse, dq, dk, dv within 2e-5 relative to the largest
// magnitude of each (float32 sums in another order), lse exact in its -inf rows.
// Built as `cuda_attention_kernels_check` in CUDA builds and run by ctest; exits 1 on a mismatch.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/dispatch.h"
#include "kernels/attention.h"
#include "kernels/cuda/check/attention_check_util.h"
#include "kernels/cuda/attention_flash.cuh"
#include "kernels/cuda/attention_tiled.cuh"

using namespace oomlab;
using namespace oomlab::flash;

namespace {
using attention_check::expect_close;
using attention_check::failures;
using attention_check::padded_tail;

struct HostBlock {
  explicit HostBlock(int threads) : bar(threads), xchg(size_t(threads)) {}
  std::barrier<> bar;
  std::vector<float> xchg;
};

struct HostCtx {   // the executor of one emulated thread (attention_flash.cuh's context)
  int t;
  int64_t x, y;
  HostBlock* b;
  int tid() const { return t; }
  int64_t bx() const { return x; }
  int64_t by() const { return y; }
  void sync() const { b->bar.arrive_and_wait(); }
  template <class Op> float group(float v, Op op) const {
    b->xchg[t] = v;
    sync();
    float r = b->xchg[t & ~7];
    for (int k = 1; k < 8; ++k) r = op(r, b->xchg[(t & ~7) + k]);
    sync();   // every lane has read before the array is written again
    return r;
  }
  float group_max(float v) const { return group(v, [](float p, float q) { return std::fmax(p, q); }); }
  float group_sum(float v) const { return group(v, [](float p, float q) { return p + q; }); }
};

// Runs `body(ctx, smem)` for every block of a (gx, gy) grid, `nthreads` host threads per block.
template <class Smem, class Body> void run_grid(int64_t gx, int64_t gy, int nthreads, Body body) {
  for (int64_t by = 0; by < gy; ++by)
    for (int64_t bx = 0; bx < gx; ++bx) {
      HostBlock block(nthreads);
      auto smem = std::make_unique<Smem>();
      std::vector<std::thread> threads;
      for (int t = 0; t < nthreads; ++t)
        threads.emplace_back([&, t] { body(HostCtx{t, bx, by, &block}, *smem); });
      for (auto& th : threads) th.join();
    }
}

uint32_t threshold(double p) { return uint32_t(std::ceil(p * 16777216.0)); }   // the kernels' rule
int64_t blocks(int64_t rows, int64_t per_block) { return (rows + per_block - 1) / per_block; }

struct Buffers {
  std::vector<float> out, lse, dq, dk, dv;
  Buffers(int64_t BH, int64_t Tq, int64_t Tk, int64_t D, int64_t Dv)
      : out(size_t(BH * Tq * Dv)), lse(size_t(BH * Tq)), dq(size_t(BH * Tq * D)), dk(size_t(BH * Tk * D)),
        dv(size_t(BH * Tk * Dv)) {}
  void point(FusedAttentionArgs& a) {
    a.out = out.data(); a.lse = lse.data(); a.dq = dq.data(); a.dk = dk.data(); a.dv = dv.data();
  }
};


struct Case {
  std::string name;
  int64_t B, NH, Tq, Tk;
  double p;
  bool causal;
  std::vector<uint8_t> mask;   // [B, Tk] or empty
  int64_t D = 64, Dv = 64;     // the flash kernels take 64 only; the tiled ones up to 128
};

// The flash kernels (attention_flash.cuh) on `a`, as attention_flash.cu launches them.
void run_flash(const FusedAttentionArgs& a, uint32_t thr) {
  run_grid<FwdSmem>(blocks(a.Tq, kBlock), a.BH, kThreads, [&](const HostCtx& x, FwdSmem& s) { fwd_body(x, a, thr, s); });
  run_grid<DqSmem>(blocks(a.Tq, kBlock), a.BH, kThreads, [&](const HostCtx& x, DqSmem& s) { dq_body(x, a, thr, s); });
  run_grid<DkvSmem>(blocks(a.Tk, kBlock), a.BH, kThreads, [&](const HostCtx& x, DkvSmem& s) { dkv_body(x, a, thr, s); });
}

// The tiled kernels (attention_tiled.cuh), head dims 64 at compile time, others at run time.
template <int kDim> void run_tiled_dims(const FusedAttentionArgs& a, uint32_t thr) {
  using namespace oomlab::tiled;
  run_grid<TileSmem>(blocks(a.Tq, kRows), a.BH, kRows, [&](const HostCtx& x, TileSmem& s) { tiled::fwd_body<kDim>(x, a, thr, s); });
  run_grid<TileSmem>(blocks(a.Tq, kRows), a.BH, kRows, [&](const HostCtx& x, TileSmem& s) { tiled::dq_body<kDim>(x, a, thr, s); });
  run_grid<DkvTileSmem>(blocks(a.Tk, kRows), a.BH, kRows,
                        [&](const HostCtx& x, DkvTileSmem& s) { tiled::dkv_body<kDim>(x, a, thr, s); });
}
void run_tiled(const FusedAttentionArgs& a, uint32_t thr) {
  a.D == 64 && a.Dv == 64 ? run_tiled_dims<64>(a, thr) : run_tiled_dims<0>(a, thr);
}

void check(const Case& c) {
  const int64_t BH = c.B * c.NH;
  std::mt19937 rng(uint32_t(c.Tq * 131 + c.Tk));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](size_t n) { std::vector<float> v(n); for (float& x : v) x = u(rng); return v; };
  const std::vector<float> q = fill(size_t(BH * c.Tq * c.D)), k = fill(size_t(BH * c.Tk * c.D)),
                           v = fill(size_t(BH * c.Tk * c.Dv)), g = fill(size_t(BH * c.Tq * c.Dv));
  FusedAttentionArgs a{q.data(), k.data(), v.data(), c.mask.empty() ? nullptr : c.mask.data(), nullptr, nullptr,
                       g.data(), nullptr, nullptr, nullptr, BH, c.NH, c.Tq, c.Tk, c.D, c.Dv, 1.0 / std::sqrt(double(c.D)),
                       c.p, 0x5eedull, 0x1000ull, c.causal};
  Buffers want(BH, c.Tq, c.Tk, c.D, c.Dv);
  FusedAttentionArgs r = a;
  want.point(r);
  fused_attention_forward_kernels().launch(cpu_device(), DType::f32, r);
  fused_attention_backward_kernels().launch(cpu_device(), DType::f32, r);
  const uint32_t thr = threshold(c.p);
  for (const char* set : {"flash", "tiled"}) {
    if (std::string(set) == "flash" && (c.D != kD || c.Dv != kD)) continue;
    Buffers got(BH, c.Tq, c.Tk, c.D, c.Dv);
    FusedAttentionArgs e = a;
    got.point(e);
    std::string(set) == "flash" ? run_flash(e, thr) : run_tiled(e, thr);
    const std::string what = std::string(set) + ": " + c.name;
    expect_close(what, "out", got.out, want.out, 2e-5);
    expect_close(what, "lse", got.lse, want.lse, 2e-5);
    expect_close(what, "dq", got.dq, want.dq, 2e-5);
    expect_close(what, "dk", got.dk, want.dk, 2e-5);
    expect_close(what, "dv", got.dv, want.dv, 2e-5);
  }
}

}  // namespace

int main() {
  ensure_kernels_registered();
  check({"one tile", 1, 1, 16, 16, 0.0, false, {}});
  check({"partial tiles, padding", 2, 3, 70, 130, 0.0, false, padded_tail(2, 130, {120, 77})});
  check({"a batch all padded", 2, 2, 33, 65, 0.0, false, padded_tail(2, 65, {60, 0})});
  check({"dropout 0.1", 1, 2, 70, 130, 0.1, false, padded_tail(1, 130, {120})});
  check({"causal", 1, 2, 130, 130, 0.0, true, {}});
  check({"causal, dropout, Tq < Tk", 2, 1, 100, 161, 0.2, true, padded_tail(2, 161, {161, 150})});
  check({"head dims 32 / 48, causal, dropout", 2, 2, 70, 90, 0.1, true, padded_tail(2, 90, {90, 80}), 32, 48});
  printf("%d failures\n", failures);
  return failures != 0;
}
