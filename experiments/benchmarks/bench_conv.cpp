// bench_conv.cpp — Google Benchmark: OpenBLAS sgemm GFLOP/s (square and conv-GEMM sizes)
// and the raw CPU conv2d kernels (forward, backward data, backward weight, and all three)
// on ResNet-20 (batch 128, 28x28 input) and ResNet-18 (batch 32, 224x224 and 64x64) layer shapes.
// Counters: GFLOPS (2*N*K*P*Q*C/groups*R*S per direction) and pct_sgemm = GFLOPS as a %
// of the best square sgemm GFLOP/s measured earlier in the same run (sgemm runs first);
// *_cpu: the same per second of process CPU time (all threads), for shared machines.
// conv_ab/*: the tap GEMMs against im2col on the small planes, alternating (bm_conv_ab).
// Calls the kernel tables directly (no autograd, no allocator). Usage:
//   ./bench_conv --benchmark_min_time=0.2 [--benchmark_filter=conv]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <string>
#include <vector>

#include "engine/ops/conv.h"
#include "experiments/benchmarks/bench_context.h"
#include "kernels/linear.h"

using namespace oomlab;

namespace {
double g_sgemm_peak = 0.0;       // best square sgemm GFLOP/s so far (wall time)
double g_sgemm_peak_cpu = 0.0;   // same per process-CPU second (all threads)

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

std::vector<float> filled(size_t n, float seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float((i * 2654435761u + size_t(seed * 1000)) % 1000) / 1000.0f - 0.5f;
  return v;
}

// Runs `body` per iteration with manual timing; reports GFLOPS and pct_sgemm.
template <class F> void timed(benchmark::State& st, double flops, bool is_square_sgemm, F&& body) {
  double total = 0.0, total_cpu = 0.0;
  int64_t iters = 0;
  for (auto _ : st) {
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
    body();
    total_cpu += process_cpu_seconds() - c0;
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    st.SetIterationTime(dt);
    total += dt;
    ++iters;
  }
  const double gflops = total > 0 ? flops * double(iters) / total * 1e-9 : 0.0;
  const double gflops_cpu = total_cpu > 0 ? flops * double(iters) / total_cpu * 1e-9 : 0.0;
  st.counters["GFLOPS"] = gflops;
  st.counters["GFLOPS_cpu"] = gflops_cpu;   // per CPU-second: less sensitive to a loaded machine
  if (is_square_sgemm) {
    g_sgemm_peak = std::max(g_sgemm_peak, gflops);
    g_sgemm_peak_cpu = std::max(g_sgemm_peak_cpu, gflops_cpu);
  }
  if (g_sgemm_peak > 0) st.counters["pct_sgemm"] = 100.0 * gflops / g_sgemm_peak;
  if (g_sgemm_peak_cpu > 0) st.counters["pct_sgemm_cpu"] = 100.0 * gflops_cpu / g_sgemm_peak_cpu;
}

void bm_sgemm(benchmark::State& st, int64_t M, int64_t N, int64_t K, bool square) {
  std::vector<float> A = filled(size_t(M * K), 1), B = filled(size_t(K * N), 2), C(size_t(M * N));
  GemmArgs g{false, false, M, N, K, 1.0, A.data(), K, B.data(), N, 0.0, C.data(), N};
  timed(st, 2.0 * double(M) * double(N) * double(K), square,
        [&] { gemm_kernels().launch(cpu_device(), DType::f32, g); });
}

struct Shape4 { const char* name; int64_t N, C, H, W, K, R, S, stride, pad; };
const Shape4 kShapes[] = {
    {"r20_16c_28x28", 128, 16, 28, 28, 16, 3, 3, 1, 1},
    {"r20_16to32c_28x28_s2", 128, 16, 28, 28, 32, 3, 3, 2, 1},
    {"r20_32c_14x14", 128, 32, 14, 14, 32, 3, 3, 1, 1},
    {"r20_32to64c_14x14_s2", 128, 32, 14, 14, 64, 3, 3, 2, 1},
    {"r20_64c_7x7", 128, 64, 7, 7, 64, 3, 3, 1, 1},
    {"r18_stem_7x7s2", 32, 3, 224, 224, 64, 7, 7, 2, 3},
    {"r18_64c_56x56", 32, 64, 56, 56, 64, 3, 3, 1, 1},
    {"r18_128c_28x28", 32, 128, 28, 28, 128, 3, 3, 1, 1},
    {"r18_256c_14x14", 32, 256, 14, 14, 256, 3, 3, 1, 1},
    {"r18_512c_7x7", 32, 512, 7, 7, 512, 3, 3, 1, 1},
    // ResNet-18 on 64x64 inputs (scripts/cpu_vs_torch.py's case): the small late planes
    {"r18in64_128c_8x8", 32, 128, 8, 8, 128, 3, 3, 1, 1},
    {"r18in64_128to256c_8x8_s2", 32, 128, 8, 8, 256, 3, 3, 2, 1},
    {"r18in64_256c_4x4", 32, 256, 4, 4, 256, 3, 3, 1, 1},
    {"r18in64_256to512c_4x4_s2", 32, 256, 4, 4, 512, 3, 3, 2, 1},
    {"r18in64_512c_2x2", 32, 512, 2, 2, 512, 3, 3, 1, 1},
};

enum Dir { kFwd, kBwdData, kBwdWeight, kAll };

void bm_conv(benchmark::State& st, Shape4 s, Dir dir) {
  Conv2dArgs a{};
  a.N = s.N; a.C = s.C; a.H = s.H; a.W = s.W; a.K = s.K; a.R = s.R; a.S = s.S;
  a.p.stride_h = a.p.stride_w = s.stride; a.p.pad_h = a.p.pad_w = s.pad;
  Shape y = conv2d_output_shape({s.N, s.C, s.H, s.W}, {s.K, s.C, s.R, s.S}, a.p);
  a.P = y[2]; a.Q = y[3];
  std::vector<float> x = filled(size_t(s.N * s.C * s.H * s.W), 1), w = filled(size_t(s.K * s.C * s.R * s.S), 2);
  std::vector<float> out(size_t(s.N * s.K * a.P * a.Q)), dy = filled(out.size(), 3);
  std::vector<float> dx(x.size()), dw(w.size());
  a.x = x.data(); a.w = w.data(); a.y = out.data(); a.dy = dy.data(); a.dx = dx.data(); a.dw = dw.data();
  const Device cpu = cpu_device();
  auto fwd = [&] { conv2d_forward_kernels().launch(cpu, DType::f32, a); };
  auto bwd_d = [&] { conv2d_backward_data_kernels().launch(cpu, DType::f32, a); };
  auto bwd_w = [&] { conv2d_backward_weight_kernels().launch(cpu, DType::f32, a); };
  const double flops = 2.0 * double(s.N * s.K * a.P * a.Q) * double(s.C * s.R * s.S);
  switch (dir) {
    case kFwd: timed(st, flops, false, [&] { fwd(); }); break;
    case kBwdData: timed(st, flops, false, [&] { bwd_d(); }); break;
    case kBwdWeight: timed(st, flops, false, [&] { bwd_w(); }); break;
    case kAll: timed(st, 3 * flops, false, [&] { fwd(); bwd_d(); bwd_w(); }); break;
  }
  benchmark::DoNotOptimize(out.data());
  benchmark::DoNotOptimize(dx.data());
  benchmark::DoNotOptimize(dw.data());
}

// conv_ab/<shape>/taps_vs_im2col: the A/B behind conv_taps_applies' rule (kernels/cpu/
// conv_taps_cpu.cpp), re-run on any CPU. Each iteration runs fwd+bwd through the tap GEMMs
// and through im2col (Conv2dArgs::cpu_path), in alternating order; counters: each path's
// median ms and the median of the per-iteration ratios taps / im2col (< 1: taps faster).
void bm_conv_ab(benchmark::State& st, Shape4 s) {
  Conv2dArgs a{};
  a.N = s.N; a.C = s.C; a.H = s.H; a.W = s.W; a.K = s.K; a.R = s.R; a.S = s.S;
  a.p.stride_h = a.p.stride_w = s.stride; a.p.pad_h = a.p.pad_w = s.pad;
  Shape y = conv2d_output_shape({s.N, s.C, s.H, s.W}, {s.K, s.C, s.R, s.S}, a.p);
  a.P = y[2]; a.Q = y[3];
  std::vector<float> x = filled(size_t(s.N * s.C * s.H * s.W), 1), w = filled(size_t(s.K * s.C * s.R * s.S), 2);
  std::vector<float> out(size_t(s.N * s.K * a.P * a.Q)), dy = filled(out.size(), 3);
  std::vector<float> dx(x.size()), dw(w.size());
  a.x = x.data(); a.w = w.data(); a.y = out.data(); a.dy = dy.data(); a.dx = dx.data(); a.dw = dw.data();
  const std::array<CpuConvPath, 2> paths = {CpuConvPath::taps, CpuConvPath::im2col};
  auto run_path = [&](CpuConvPath path) {
    a.cpu_path = path;
    const auto t0 = std::chrono::steady_clock::now();
    conv2d_forward_kernels().launch(cpu_device(), DType::f32, a);
    conv2d_backward_data_kernels().launch(cpu_device(), DType::f32, a);
    conv2d_backward_weight_kernels().launch(cpu_device(), DType::f32, a);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::array<std::vector<double>, 2> ms;
  std::vector<double> ratios;
  int64_t i = 0;
  for (auto _ : st) {
    std::array<double, 2> t{};
    for (int k = 0; k < 2; ++k) {   // taps first on even iterations, im2col first on odd ones
      const int which = int((k + i) % 2);
      t[size_t(which)] = run_path(paths[size_t(which)]);
    }
    st.SetIterationTime(t[0] + t[1]);
    ms[0].push_back(1e3 * t[0]);
    ms[1].push_back(1e3 * t[1]);
    ratios.push_back(t[0] / t[1]);
    ++i;
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
    return v[v.size() / 2];
  };
  a.cpu_path = CpuConvPath::by_shape;
  st.counters["taps_ms"] = median(ms[0]);
  st.counters["im2col_ms"] = median(ms[1]);
  st.counters["taps_over_im2col"] = median(ratios);
  benchmark::DoNotOptimize(dw.data());
}

// The small-plane shapes the rule decides on: ResNet-18's late stages at 64x64 and 224x224
// inputs (the 512-channel 7x7 plane is past kMaxReduction, its 8x8 -> 4x4 conv strided).
const Shape4 kTapShapes[] = {
    {"r18in64_128c_8x8", 32, 128, 8, 8, 128, 3, 3, 1, 1},
    {"r18in64_128to256c_8x8_s2", 32, 128, 8, 8, 256, 3, 3, 2, 1},
    {"r18in64_256c_4x4", 32, 256, 4, 4, 256, 3, 3, 1, 1},
    {"r18in64_256to512c_4x4_s2", 32, 256, 4, 4, 512, 3, 3, 2, 1},
    {"r18in64_512c_2x2", 32, 512, 2, 2, 512, 3, 3, 1, 1},
    {"r18_512c_7x7", 32, 512, 7, 7, 512, 3, 3, 1, 1},
    {"r18_256to512c_14x14_s2", 32, 256, 14, 14, 512, 3, 3, 2, 1},
    {"r18in256_512c_8x8", 32, 512, 8, 8, 512, 3, 3, 1, 1},
    {"r18in256_256to512c_16x16_s2", 32, 256, 16, 16, 512, 3, 3, 2, 1},
    {"unpadded_128c_10x10", 32, 128, 10, 10, 128, 3, 3, 1, 0},   // no products with padding
};
}  // namespace

int main(int argc, char** argv) {
  for (int64_t n : {256, 512, 1024, 2048})
    benchmark::RegisterBenchmark(("sgemm/square_" + std::to_string(n)).c_str(), bm_sgemm, n, n, n, true)
        ->UseManualTime()->Unit(benchmark::kMillisecond);
  // GEMM sizes the conv kernels issue (forward M=K, N=panel columns, K=C*R*S).
  struct G { const char* name; int64_t M, N, K; };
  for (G g : {G{"fwd_r18_64c_56x56", 64, 3136, 576}, G{"fwd_r18_512c_7x7", 512, 2058, 4608},
              G{"fwd_r20_16c_28x28", 16, 2352, 144}, G{"bwdw_r18_64c_56x56", 64, 576, 3136},
              G{"bwdd_r18_256c_14x14", 2304, 2156, 256}})
    benchmark::RegisterBenchmark((std::string("sgemm/") + g.name).c_str(), bm_sgemm, g.M, g.N, g.K, false)
        ->UseManualTime()->Unit(benchmark::kMillisecond);
  const char* dir_names[] = {"fwd", "bwd_data", "bwd_weight", "fwd+bwd"};
  for (const Shape4& s : kShapes)
    for (Dir d : {kFwd, kBwdData, kBwdWeight, kAll})
      benchmark::RegisterBenchmark((std::string("conv/") + s.name + "/" + dir_names[d]).c_str(), bm_conv, s, d)
          ->UseManualTime()->Unit(benchmark::kMillisecond);
  for (const Shape4& s : kTapShapes)
    benchmark::RegisterBenchmark((std::string("conv_ab/") + s.name + "/taps_vs_im2col").c_str(), bm_conv_ab, s)
        ->UseManualTime()->Unit(benchmark::kMillisecond);
  add_benchmark_context(cpu_device());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
