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
using namespace attention_check;   // the shared cases, buffers, reference and comparison

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

int64_t blocks(int64_t rows, int64_t per_block) { return (rows + per_block - 1) / per_block; }

// The flash kernels (attention_flash.cuh) on `a`, as attention_flash.cu launches them.
void run_flash(const FusedAttentionArgs& a, uint32_t thr) {
  run_grid<FwdSmem>(blocks(a.Tq, kBlock), a.BH, kThreads,
                    [&](const HostCtx& x, FwdSmem& s) { fwd_body(x, a, thr, s); });
  run_grid<DqSmem>(blocks(a.Tq, kBlock), a.BH, kThreads, [&](const HostCtx& x, DqSmem& s) { dq_body(x, a, thr, s); });
  run_grid<DkvSmem>(blocks(a.Tk, kBlock), a.BH, kThreads,
                    [&](const HostCtx& x, DkvSmem& s) { dkv_body(x, a, thr, s); });
}

// The tiled kernels (attention_tiled.cuh), head dims 64 at compile time, others at run time.
template <int kDim> void run_tiled_dims(const FusedAttentionArgs& a, uint32_t thr) {
  using namespace oomlab::tiled;
  run_grid<TileSmem>(blocks(a.Tq, kRows), a.BH, kRows,
                     [&](const HostCtx& x, TileSmem& s) { tiled::fwd_body<kDim>(x, a, thr, s); });
  run_grid<TileSmem>(blocks(a.Tq, kRows), a.BH, kRows,
                     [&](const HostCtx& x, TileSmem& s) { tiled::dq_body<kDim>(x, a, thr, s); });
  run_grid<DkvTileSmem>(blocks(a.Tk, kRows), a.BH, kRows,
                        [&](const HostCtx& x, DkvTileSmem& s) { tiled::dkv_body<kDim>(x, a, thr, s); });
}
void run_tiled(const FusedAttentionArgs& a, uint32_t thr) {
  a.D == 64 && a.Dv == 64 ? run_tiled_dims<64>(a, thr) : run_tiled_dims<0>(a, thr);
}

void check(const Case& c) {
  std::mt19937 rng(uint32_t(c.Tq * 131 + c.Tk));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](int64_t rows, int64_t dim) {
    std::vector<float> v(size_t(c.B * c.NH * rows * dim));
    for (float& x : v) x = u(rng);
    return v;
  };
  const std::vector<float> q = fill(c.Tq, c.D), k = fill(c.Tk, c.D), v = fill(c.Tk, c.Dv), g = fill(c.Tq, c.Dv);
  const FusedAttentionArgs a = case_args(c, q, k, v, g);
  const Buffers want = cpu_reference(a);
  const uint32_t thr = threshold(c.p);
  for (const char* set : {"flash", "tiled"}) {
    if (std::string(set) == "flash" && (c.D != kD || c.Dv != kD)) continue;
    FusedAttentionArgs e = a;
    Buffers got(e);
    got.point(e);
    std::string(set) == "flash" ? run_flash(e, thr) : run_tiled(e, thr);
    expect_buffers(std::string(set) + ": " + c.name, got, want, 2e-5, 2e-5);
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
