// bn_nhwc_check.cu — a CPU-only run of batchnorm_nhwc.cu's split kernels (channels_last
// batch_norm): the kernels' own bodies (batchnorm_nhwc.cuh), executed by a host emulation of
// each thread block (one host thread per GPU thread, a std::barrier for __syncthreads), block
// by block over the launch grid split_for() gives, against the CPU's row kernels
// (kernels/cpu/batchnorm_rows_cpu.cpp, through the kernel tables with channels_last). So the
// indices, the row splits, the partial and total orders and the early exits of lanes past C
// that the GPU will run are exercised on machines without a GPU (CI included). Cases:
// training forward with and without relu, its statistics in two passes and in one (shifted
// sums, OOMLAB_CUDA_BN_CL_ONE_PASS), training backward (dx, dweight, dbias; with the relu
// mask), eval backward with dweight (the sums path); channel counts below, at and above a
// 32-lane tile, row counts that leave a short last split, and hostile channels (means up to
// 35,000 with spreads of 5, the shift K an outlier, a constant channel). Both sides add float32
// data in double in different orders; bar: every output within 4e-6 relative to the largest
// magnitude of its tensor (float32 rounding of the same double sums); the per-channel statistics
// each within 2 float32 ulps of the CPU's.
// Built as `cuda_bn_nhwc_check` in CUDA builds and run by ctest; exits 1 on a mismatch.
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/backend.h"
#include "engine/core/dispatch.h"
#include "kernels/batchnorm.h"
#include "kernels/cuda/batchnorm_nhwc.cuh"

using namespace oomlab;
namespace bn = oomlab::bn_nhwc;

namespace {
int failures = 0;

struct HostIO {   // float32 storage and compute
  using C = float;
  static float ld(float v) { return v; }
  static float st(float v) { return v; }
};

struct HostCtx {
  int t;
  int64_t x, y;
  std::barrier<>* bar;
  int tid() const { return t; }
  int64_t bx() const { return x; }
  int64_t by() const { return y; }
  void sync() const { bar->arrive_and_wait(); }
};

// The totals kernel's work: channel_total for every channel (one GPU thread each).
template <int NV> void totals(const bn::Split& sp, const std::vector<double>& part, std::vector<double>& tot) {
  for (int64_t c = 0; c < sp.C; ++c) bn::channel_total<NV>(sp, part.data(), c, tot.data());
}

// body(ctx, smem) for every block of the split's grid: kThreads host threads walk the blocks
// in order together, meeting at a barrier after each (the block's shared memory is then free).
template <class Body> void run_grid(const bn::Split& sp, Body body) {
  std::barrier<> bar(bn::kThreads);
  auto sm = std::make_unique<bn::Smem>();
  std::vector<std::thread> threads;
  for (int t = 0; t < bn::kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int64_t by = 0; by < sp.tiles; ++by)
        for (int64_t bx = 0; bx < sp.S; ++bx) {
          body(HostCtx{t, bx, by, &bar}, *sm);
          bar.arrive_and_wait();
        }
    });
  for (auto& th : threads) th.join();
}

std::vector<float> randoms(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Hostile channels for the one-pass statistics: channel c shifted by offset * c (a mean up to
// thousands of times the spread), and channel 0's first element (the shift K) far out in the
// tail; a constant channel 1 (variance 0).
std::vector<float> with_offset(std::vector<float> x, int64_t C, float offset) {
  if (offset == 0.0f) return x;
  const int64_t M = int64_t(x.size()) / C;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t c = 0; c < C; ++c) x[size_t(m * C + c)] += offset * float(c);
  x[0] += 40.0f;
  for (int64_t m = 0; m < M && C > 1; ++m) x[size_t(m * C + 1)] = 7.25f;
  return x;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  float scale = 1e-30f;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= 4e-6f * scale)) {
      std::printf("FAIL %s [%zu]: emulated %.9g vs cpu %.9g\n", what.c_str(), i, double(got[i]), double(want[i]));
      ++failures;
      return;
    }
}

// Per-channel statistics: each within 2 float32 ulps (2^-22 relative) of the CPU's, both
// being double sums of the same data rounded once.
void expect_each_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= 0x1p-22f * std::fabs(want[i]))) {
      std::printf("FAIL %s [%zu]: emulated %.9g vs cpu %.9g\n", what.c_str(), i, double(got[i]), double(want[i]));
      ++failures;
      return;
    }
}

struct Case { int64_t M, C; bool relu, one_pass; float offset = 0.0f; };

void check_training(const Case& k) {
  const int64_t M = k.M, C = k.C;
  const std::string name = "M=" + std::to_string(M) + " C=" + std::to_string(C) + (k.relu ? " relu" : "") +
                           (k.one_pass ? " one-pass" : "") + (k.offset != 0.0f ? " offset" : "");
  const std::vector<float> x = with_offset(randoms(size_t(M * C), -2.0f, 3.0f, 1), C, k.offset),
                           w = randoms(size_t(C), 0.5f, 1.5f, 2), b = randoms(size_t(C), -0.5f, 0.5f, 3),
                           dy = randoms(size_t(M * C), -1.0f, 1.0f, 4);
  // the CPU reference (batchnorm_rows_cpu.cpp)
  std::vector<float> y(x.size()), rm(size_t(C), 0.1f), rv(size_t(C), 0.9f), sm(static_cast<size_t>(C)),
      si(static_cast<size_t>(C));
  BatchNormArgs a{};
  a.N = M; a.C = C; a.HW = 1; a.momentum = 0.1; a.eps = 1e-5; a.training = true; a.relu = k.relu;
  a.channels_last = true;
  a.x = x.data(); a.weight = w.data(); a.bias = b.data(); a.y = y.data();
  a.running_mean = rm.data(); a.running_var = rv.data(); a.save_mean = sm.data(); a.save_invstd = si.data();
  batch_norm_forward_kernels().launch(cpu_device(), DType::f32, a);
  std::vector<float> dx(x.size()), dw(static_cast<size_t>(C)), db(static_cast<size_t>(C));
  BatchNormArgs g = a;
  g.dy = dy.data(); g.dx = dx.data(); g.dweight = dw.data(); g.dbias = db.data();
  g.running_mean = g.running_var = nullptr;
  batch_norm_backward_kernels().launch(cpu_device(), DType::f32, g);
  // the kernels' bodies on emulated blocks
  const bn::Split sp = bn::split_for(M, C);
  std::vector<double> part1(size_t(C * sp.S)), part2(size_t(C * sp.S)), part(size_t(2 * C * sp.S));
  std::vector<double> tot1(static_cast<size_t>(C)), tot2(static_cast<size_t>(C)), tot(size_t(2 * C));
  std::vector<float> ey(x.size()), erm(size_t(C), 0.1f), erv(size_t(C), 0.9f), esm(static_cast<size_t>(C)),
      esi(static_cast<size_t>(C));
  bn::TrainStats<HostIO, float> ts{x.data(), tot.data(), nullptr, true};
  if (k.one_pass) {   // batchnorm_nhwc.cu's launch_statistics under cuda_bn_cl_one_pass()
    run_grid(sp,
             [&](const HostCtx& c, bn::Smem& s) { bn::shifted_sums_body<HostIO>(c, sp, x.data(), part.data(), s); });
    totals<2>(sp, part, tot);
  } else {
    run_grid(sp, [&](const HostCtx& c, bn::Smem& s) { bn::sum_body<HostIO>(c, sp, x.data(), part1.data(), s); });
    totals<1>(sp, part1, tot1);
    run_grid(sp, [&](const HostCtx& c, bn::Smem& s) {
      bn::sqdev_body<HostIO>(c, sp, x.data(), tot1.data(), part2.data(), s);
    });
    totals<1>(sp, part2, tot2);
    ts = {x.data(), tot1.data(), tot2.data(), false};
  }
  run_grid(sp, [&](const HostCtx& c, bn::Smem&) {
    bn::train_apply_body<HostIO>(c, sp, x.data(), ey.data(), ts, bn::Stats{1e-5, 0.1, k.relu}, w.data(), b.data(),
                                 erm.data(), erv.data(), esm.data(), esi.data());
  });
  expect_close(ey, y, name + " y");
  expect_each_close(esm, sm, name + " save_mean");
  expect_each_close(esi, si, name + " save_invstd");
  expect_each_close(erm, rm, name + " running_mean");
  expect_each_close(erv, rv, name + " running_var");
  const bn::BackwardSrc<float> src{true, true, 1e-5, nullptr, nullptr, esm.data(), esi.data()};
  const float* ym = k.relu ? ey.data() : nullptr;
  std::vector<float> edx(x.size()), edw(static_cast<size_t>(C)), edb(static_cast<size_t>(C));
  run_grid(sp, [&](const HostCtx& c, bn::Smem& s) {
    bn::backward_sums_body<HostIO>(c, sp, dy.data(), x.data(), src, part.data(), ym, s);
  });
  totals<2>(sp, part, tot);
  run_grid(sp, [&](const HostCtx& c, bn::Smem&) {
    bn::backward_apply_body<HostIO>(c, sp, dy.data(), x.data(), edx.data(), src, w.data(), tot.data(), edw.data(),
                                    edb.data(), ym);
  });
  expect_close(edx, dx, name + " dx");
  expect_close(edw, dw, name + " dweight");
  expect_close(edb, db, name + " dbias");
}

void check_eval_weight_grad(int64_t M, int64_t C) {
  const std::vector<float> x = randoms(size_t(M * C), -2.0f, 3.0f, 5), w = randoms(size_t(C), 0.5f, 1.5f, 6),
                           dy = randoms(size_t(M * C), -1.0f, 1.0f, 7), rm = randoms(size_t(C), -0.2f, 0.2f, 8),
                           rv = randoms(size_t(C), 0.5f, 1.5f, 9);
  std::vector<float> dx(x.size()), dw(static_cast<size_t>(C)), db(static_cast<size_t>(C));
  BatchNormArgs g{};
  g.N = M; g.C = C; g.HW = 1; g.eps = 1e-5; g.training = false; g.channels_last = true;
  g.x = x.data(); g.weight = w.data(); g.running_mean = const_cast<float*>(rm.data());
  g.running_var = const_cast<float*>(rv.data()); g.dy = dy.data(); g.dx = dx.data(); g.dweight = dw.data();
  g.dbias = db.data();
  batch_norm_backward_kernels().launch(cpu_device(), DType::f32, g);
  const bn::Split sp = bn::split_for(M, C);
  std::vector<double> part(size_t(2 * C * sp.S)), tot(size_t(2 * C));
  const bn::BackwardSrc<float> src{false, true, 1e-5, rm.data(), rv.data(), nullptr, nullptr};
  std::vector<float> edx(x.size()), edw(static_cast<size_t>(C)), edb(static_cast<size_t>(C));
  run_grid(sp, [&](const HostCtx& c, bn::Smem& s) {
    bn::backward_sums_body<HostIO>(c, sp, dy.data(), x.data(), src, part.data(), static_cast<const float*>(nullptr), s);
  });
  totals<2>(sp, part, tot);
  run_grid(sp, [&](const HostCtx& c, bn::Smem&) {
    bn::backward_apply_body<HostIO>(c, sp, dy.data(), x.data(), edx.data(), src, w.data(), tot.data(), edw.data(),
                                    edb.data(), static_cast<const float*>(nullptr));
  });
  const std::string name = "eval M=" + std::to_string(M) + " C=" + std::to_string(C);
  expect_close(edx, dx, name + " dx");
  expect_close(edw, dw, name + " dweight");
  expect_close(edb, db, name + " dbias");
}
}  // namespace

int main() {
  ensure_kernels_registered();
  for (bool one_pass : {false, true})
    for (const Case& k : {Case{600, 40, false, one_pass}, Case{1001, 64, true, one_pass},
                          Case{77, 3, false, one_pass}, Case{130, 32, true, one_pass},
                          Case{900, 36, false, one_pass, 1000.0f}})
      check_training(k);
  check_eval_weight_grad(300, 48);
  std::printf("%s: channels_last batch_norm kernel bodies on emulated blocks vs the CPU (%d failure%s)\n",
              failures ? "FAILED" : "ok", failures, failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
