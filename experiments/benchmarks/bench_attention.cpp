// bench_attention.cpp — Google Benchmark: attention forward + backward on the CPU, eager
// (scaled_dot_product_attention: bmm, masked softmax, dropout, bmm) against fused
// (fused_scaled_dot_product_attention: the FlashAttention-style op), measured alternating in
// the same iterations so that both see the same machine state:
//   BM_attention_eager_vs_fused/<seq>/<dropout %>  B 1, 12 heads, head dim 64 (BERT-base's),
//       dropout 10% (BERT's) or 0, training; counters eager_ms and fused_ms (medians over the
//       iterations), fused_over_eager (median of the per-iteration ratios), and its 10th /
//       90th percentiles.
// Each iteration runs both, in an order that alternates between iterations, with fresh
// gradients; the inputs are fixed (deterministic fill). The bar: fused no slower than
// eager at s >= 512.
// Usage: ./bench_attention --benchmark_min_time=... [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "engine/core/rng.h"
#include "engine/ops/attention.h"
#include "engine/ops/elementwise.h"
#include "experiments/benchmarks/bench_context.h"

using namespace oomlab;

namespace {

Tensor filled(const Shape& shape, uint32_t seed) {   // values in [-1, 1), fixed by seed
  Tensor t = Tensor::empty(shape, DType::f32, cpu_device());
  float* p = t.data<float>();
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = float(s >> 8) / float(1 << 24) * 2.0f - 1.0f;
  }
  t.set_requires_grad(true);
  return t;
}

double seconds_of_step(bool fused, double p, std::vector<Tensor>& qkv, Generator& gen) {
  for (Tensor& t : qkv) t.zero_grad(true);
  const auto t0 = std::chrono::steady_clock::now();
  Tensor y = fused ? fused_scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], Tensor(), p, true, &gen)
                   : scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], Tensor(), p, true, &gen);
  sum_all(y).backward();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[size_t(q * double(v.size() - 1) + 0.5)];
}

void BM_attention_eager_vs_fused(benchmark::State& st) {
  const int64_t seq = st.range(0);
  const double p = double(st.range(1)) / 100.0;
  std::vector<Tensor> qkv = {filled({1, 12, seq, 64}, 1), filled({1, 12, seq, 64}, 2), filled({1, 12, seq, 64}, 3)};
  Generator gen{7, 0};
  seconds_of_step(false, p, qkv, gen);   // warm-up: the allocator's blocks and OpenBLAS's threads
  seconds_of_step(true, p, qkv, gen);
  std::vector<double> eager, fused, ratio;
  int64_t i = 0;
  for (auto _ : st) {
    const bool fused_first = (i++ % 2) == 1;
    const double first = seconds_of_step(fused_first, p, qkv, gen);
    const double second = seconds_of_step(!fused_first, p, qkv, gen);
    eager.push_back(fused_first ? second : first);
    fused.push_back(fused_first ? first : second);
    ratio.push_back(fused.back() / eager.back());
  }
  st.counters["eager_ms"] = 1e3 * quantile(eager, 0.5);
  st.counters["fused_ms"] = 1e3 * quantile(fused, 0.5);
  st.counters["fused_over_eager"] = quantile(ratio, 0.5);
  st.counters["ratio_p10"] = quantile(ratio, 0.1);
  st.counters["ratio_p90"] = quantile(ratio, 0.9);
}
BENCHMARK(BM_attention_eager_vs_fused)
    ->ArgsProduct({{128, 512, 1024, 2048}, {10, 0}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(10);

}  // namespace

OOMLAB_BENCHMARK_MAIN(cpu_device())
