// bench_cuda.cpp — Google Benchmark of the CUDA backend's memory-bound kernels against the
// device-to-device copy measured first in the same process (the bandwidth ceiling):
//   cuda/copy/<MiB>       dst.copy_(src): bytes = read + write
//   cuda/add, cuda/mul    out = a + b, a * b (axpby / mul tables): 2 reads + 1 write
//   cuda/relu             out = relu(x): 1 read + 1 write
//   cuda/sgd_momentum     fused SGD step with momentum: reads p, g, buf; writes p, buf
//   cuda/adam             fused Adam step: reads p, g, m, v; writes p, m, v
// Counters: GBps (bytes / s, counting each byte read and written once) and pct_copy (GBps
// as % of the copy's GBps at the same size). Timing: host clock around `iters` launches
// followed by device_synchronize (engine/core/backend.h), reported with UseManualTime;
// the sizes (64 MiB .. 1 GiB per tensor) make launch gaps negligible. Engine API only: no
// CUDA header here. Without a usable CUDA device every benchmark is skipped with the reason.
// Usage: ./bench_cuda --benchmark_out=cuda.json --benchmark_out_format=json
#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <memory>

#include "engine/autograd/grad_mode.h"
#include "engine/core/backend.h"
#include "engine/core/dispatch.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/activation.h"
#include "engine/ops/elementwise.h"
#include "engine/optim/optimizer.h"
#include "experiments/benchmarks/bench_context.h"

using namespace oomlab;

namespace {
const Device kCuda = parse_device("cuda:0");
std::map<int64_t, double> g_copy_gbps;   // MiB per tensor -> copy GB/s

bool cuda_usable(std::string* why) {
  if (!built_with_cuda()) { *why = "built without CUDA"; return false; }
  try {
    ensure_kernels_registered();   // the CUDA backend registers its raw memory with its kernels
    allocator_for(kCuda);
    return true;
  } catch (const std::exception& e) {
    *why = e.what();
    return false;
  }
}

Tensor filled(int64_t n, double lo, double hi) {
  Tensor t = Tensor::uniform({n}, lo, hi, DType::f32);   // host init, then one copy
  Tensor d = Tensor::empty({n}, DType::f32, kCuda);
  d.copy_(t);
  return d;
}

// Runs fn() `iters` times per benchmark iteration and reports bytes_per_call moved.
template <class F> void time_loop(benchmark::State& st, int64_t mib, double bytes_per_call, F fn) {
  fn();   // warm-up: kernel load, allocator segments
  device_synchronize(kCuda);
  const int iters = 10;
  double total = 0;
  int64_t calls = 0;
  for (auto _ : st) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    device_synchronize(kCuda);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st.SetIterationTime(dt / iters);
    total += dt;
    calls += iters;
  }
  const double gbps = bytes_per_call * double(calls) / total * 1e-9;
  st.counters["GBps"] = gbps;
  st.counters["MiB_per_tensor"] = double(mib);
  if (auto it = g_copy_gbps.find(mib); it != g_copy_gbps.end()) st.counters["pct_copy"] = 100.0 * gbps / it->second;
}

#define OOMLAB_NEED_CUDA(st)                                   \
  std::string why_;                                            \
  if (!cuda_usable(&why_)) { (st).SkipWithError(why_.c_str()); return; }

void BM_copy(benchmark::State& st) {
  OOMLAB_NEED_CUDA(st);
  const int64_t mib = st.range(0), n = mib << 18;
  Tensor a = filled(n, -1, 1), b = Tensor::empty({n}, DType::f32, kCuda);
  time_loop(st, mib, 2.0 * 4 * double(n), [&] { b.copy_(a); });
  g_copy_gbps[mib] = st.counters["GBps"];
}

// out = op(a, b): two reads and one write per element.
template <Tensor (*Op)(const Tensor&, const Tensor&)> void BM_binary(benchmark::State& st) {
  OOMLAB_NEED_CUDA(st);
  NoGradGuard ng;
  const int64_t mib = st.range(0), n = mib << 18;
  Tensor a = filled(n, -1, 1), b = filled(n, -1, 1);
  time_loop(st, mib, 3.0 * 4 * double(n), [&] { Tensor c = Op(a, b); });
}

void BM_relu(benchmark::State& st) {
  OOMLAB_NEED_CUDA(st);
  NoGradGuard ng;
  const int64_t mib = st.range(0), n = mib << 18;
  Tensor a = filled(n, -1, 1);
  time_loop(st, mib, 2.0 * 4 * double(n), [&] { Tensor c = relu(a); });
}

// One parameter of n floats with a gradient; the optimizer's fused step over it.
void optimizer_bench(benchmark::State& st, const char* name, double bytes_per_float) {
  OOMLAB_NEED_CUDA(st);
  NoGradGuard ng;
  const int64_t mib = st.range(0), n = mib << 18;
  Tensor p = filled(n, -1, 1);
  p.set_requires_grad(true);
  p.set_grad(filled(n, -1e-3, 1e-3));
  ParamGroup g;
  g.params = {{"w", p}};
  g.lr = 1e-3;
  g.momentum = 0.9;
  std::unique_ptr<Optimizer> opt = make_optimizer(name, {g});
  time_loop(st, mib, bytes_per_float * 4 * double(n), [&] { opt->step(); });
}
void BM_sgd_momentum(benchmark::State& st) { optimizer_bench(st, "sgd", 5.0); }
void BM_adam(benchmark::State& st) { optimizer_bench(st, "adam", 7.0); }

void sizes(benchmark::internal::Benchmark* b) {
  b->Arg(64)->Arg(256)->Arg(1024)->UseManualTime()->Unit(benchmark::kMicrosecond);
}
}  // namespace

BENCHMARK(BM_copy)->Name("cuda/copy")->Apply(sizes);
BENCHMARK(BM_binary<add>)->Name("cuda/add")->Apply(sizes);
BENCHMARK(BM_binary<mul>)->Name("cuda/mul")->Apply(sizes);
BENCHMARK(BM_relu)->Name("cuda/relu")->Apply(sizes);
BENCHMARK(BM_sgd_momentum)->Name("cuda/sgd_momentum")->Apply(sizes);
BENCHMARK(BM_adam)->Name("cuda/adam")->Apply(sizes);

OOMLAB_BENCHMARK_MAIN(kCuda)
