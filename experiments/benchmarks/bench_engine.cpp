// bench_engine.cpp — Google Benchmark for whole-engine figures, each measured against an
// OpenBLAS sgemm run in the same process (sgemm runs first):
//   BM_sgemm_square/1024        reference GFLOP/s of this machine
//   BM_train_step_cpu/<model>   one full training step (SGD momentum) on synthetic data,
//                               images/s and pct_sgemm = model FLOP/s as % of sgemm
//                               (FLOPs: 3x the forward conv+linear multiply-adds x2)
//   BM_train_step_meta          full ResNet-50 step at batch 256 on the meta device
//   BM_train_step_cpu_bert_mini bert-mini, batch 32, seq 128, AdamW: tokens/s, pct_sgemm
//                               (FLOPs: 3x forward linear MACs x2 + attention's two bmm,
//                               4*b*s^2*h per layer)
//   BM_train_step_meta_bert_base bert-base, batch 32, seq 512, AdamW on the meta device
//   BM_autograd_overhead        per-op cost of recording + backward for a chain of tiny ops
//   BM_synthetic_sample/<table> one 3x224x224 learnable synthetic sample, its prototype
//                               from the class table (1) or redrawn from its stream (0)
// Usage: ./bench_engine --benchmark_min_time=1 [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <chrono>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/data/dataset.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/forward_observer.h"
#include "engine/ops/elementwise.h"
#include "engine/optim/optimizer.h"
#include "engine/train/train_step.h"
#include "models/model_zoo.h"
#include "experiments/benchmarks/bench_context.h"

using namespace oomlab;

namespace {
double g_sgemm_gflops = 0;

void BM_sgemm_square(benchmark::State& st) {
  const int n = int(st.range(0));
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  double total = 0;
  int64_t iters = 0;
  for (auto _ : st) {
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++iters;
  }
  double g = 2.0 * n * n * double(n) * double(iters) / total * 1e-9;
  g_sgemm_gflops = std::max(g_sgemm_gflops, g);
  st.counters["GFLOPS"] = g;
}
BENCHMARK(BM_sgemm_square)->Arg(1024)->Unit(benchmark::kMillisecond);

// Forward multiply-add FLOPs (x2 per MAC) of conv and linear layers, measured on meta,
// plus attention's QK^T and PV batched matmuls for the BERT models (not modules).
double forward_flops(const std::string& name, const ModelConfig& base, int64_t batch) {
  ModelConfig cfg = base;
  cfg.device = meta_device();
  nn::ModulePtr m = build_model(name, cfg);
  double flops = 0;
  nn::ForwardObserverGuard obs([&](const nn::Module& mod, const Tensor&, const Tensor& out) {
    std::string t = mod.type_name();
    if (t != "Conv2d" && t != "Linear") return;
    Tensor w = mod.named_parameters()[0].second;   // weight first
    double macs_per_output = double(w.numel()) / double(w.size(0));
    flops += 2.0 * double(out.numel()) * macs_per_output;
  });
  const bool tokens = model_input_kind(name) == InputKind::tokens;
  Tensor x = Tensor::empty(model_input_shape(name, cfg, batch), tokens ? DType::i64 : DType::f32, meta_device());
  NoGradGuard ng;
  (*m)(x);
  if (tokens) {
    BertShape b = bert_shape(name, cfg);
    flops += double(b.layers) * 4.0 * double(batch) * double(b.seq_len * b.seq_len) * double(b.hidden);
  }
  return flops;
}

void train_step_bench(benchmark::State& st, const std::string& name, ModelConfig cfg, int64_t batch, Device dev,
                      const std::string& optimizer = "sgd") {
  reset_allocators();
  cfg.device = dev;
  nn::ModulePtr model = build_model(name, cfg);
  ParamGroup g;
  g.params = model->named_parameters();
  g.lr = optimizer == "sgd" ? 0.01 : 1e-4;
  g.momentum = optimizer == "sgd" ? 0.9 : 0.0;
  auto opt = make_optimizer(optimizer, {g});
  const Shape in_shape = model_input_shape(name, cfg, batch);
  const bool tokens = model_input_kind(name) == InputKind::tokens;
  int64_t in_numel = 1;
  for (int64_t d : in_shape) in_numel *= d;
  std::vector<float> images(tokens ? 0 : size_t(in_numel));
  std::vector<int64_t> ids(tokens ? size_t(in_numel) : 0);
  std::vector<int64_t> labels(size_t(batch), 1);
  for (size_t i = 0; i < images.size(); ++i) images[i] = float((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = 4 + int64_t((i * 2654435761u) % 996);   // no padding
  for (int64_t i = 0; i < batch; ++i) labels[size_t(i)] = i % cfg.num_classes;
  const double step_flops = dev.is_meta() ? 0.0 : 3.0 * forward_flops(name, cfg, batch);
  double total = 0;
  int64_t iters = 0;
  for (auto _ : st) {
    auto t0 = std::chrono::steady_clock::now();
    Tensor x = tokens ? tokens_to_device(ids.data(), in_shape, dev) : images_to_device(images.data(), in_shape, dev);
    Tensor y = labels_to_device(labels.data(), batch, dev);
    StepOutput out = train_step(*model, *opt, x, y, /*track_memory=*/false);
    benchmark::DoNotOptimize(out.loss.item());
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++iters;
  }
  const double sec = total / double(iters);
  st.counters["samples_per_s"] = double(batch) / sec;
  if (tokens) st.counters["tokens_per_s"] = double(in_numel) / sec;
  if (step_flops > 0) {
    st.counters["step_GFLOP"] = step_flops * 1e-9;
    st.counters["GFLOPS"] = step_flops / sec * 1e-9;
    if (g_sgemm_gflops > 0) st.counters["pct_sgemm"] = 100.0 * step_flops / sec * 1e-9 / g_sgemm_gflops;
  }
}

void BM_train_step_cpu_resnet20(benchmark::State& st) {
  ModelConfig cfg = default_model_config("resnet20");
  cfg.num_classes = 10;
  train_step_bench(st, "resnet20", cfg, 128, cpu_device());
}
BENCHMARK(BM_train_step_cpu_resnet20)->Unit(benchmark::kMillisecond)->Iterations(20);

void BM_train_step_meta_resnet50(benchmark::State& st) {
  ModelConfig cfg = default_model_config("resnet50");
  cfg.num_classes = 1000;
  train_step_bench(st, "resnet50", cfg, 256, meta_device());
}
BENCHMARK(BM_train_step_meta_resnet50)->Unit(benchmark::kMillisecond);

void BM_train_step_cpu_bert_mini(benchmark::State& st) {
  ModelConfig cfg = default_model_config("bert-mini");
  cfg.num_classes = 2;
  cfg.seq_len = 128;
  train_step_bench(st, "bert-mini", cfg, 32, cpu_device(), "adamw");
}
BENCHMARK(BM_train_step_cpu_bert_mini)->Unit(benchmark::kMillisecond)->Iterations(10);

void BM_train_step_meta_bert_base(benchmark::State& st) {
  ModelConfig cfg = default_model_config("bert-base");
  cfg.num_classes = 2;
  cfg.seq_len = 512;
  train_step_bench(st, "bert-base", cfg, 32, meta_device(), "adamw");
}
BENCHMARK(BM_train_step_meta_bert_base)->Unit(benchmark::kMillisecond);

// Chain of N tiny ops (1-element scale), then backward: time per op (forward record +
// backward), i.e. the bookkeeping cost the engine adds per op.
void BM_autograd_overhead(benchmark::State& st) {
  const int64_t n_ops = st.range(0);
  reset_allocators();
  Tensor w = Tensor::full({1}, 1.0, DType::f32);
  w.set_requires_grad(true);
  for (auto _ : st) {
    Tensor h = w;
    for (int64_t i = 0; i < n_ops; ++i) h = scale(h, 1.0001);
    h.backward(Tensor::ones({1}));
    w.zero_grad();
  }
  st.counters["us_per_op"] = benchmark::Counter(double(n_ops) * double(st.iterations()),
                                                benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  st.counters["us_per_op"] = st.counters["us_per_op"];
}
BENCHMARK(BM_autograd_overhead)->Arg(1000)->Unit(benchmark::kMicrosecond);
}  // namespace

OOMLAB_BENCHMARK_MAIN(cpu_device())

static void BM_synthetic_sample(benchmark::State& state) {
  const bool table = state.range(0) != 0;
  SyntheticImageDataset ds({3, 224, 224}, 1 << 20, 10, 1, true, 0.5f, table ? int64_t(1) << 30 : 0);
  std::vector<float> image(3 * 224 * 224);
  int64_t label = 0, i = 0;
  for (auto _ : state) {
    ds.get(i++ % ds.size(), image.data(), &label);
    benchmark::DoNotOptimize(image.data());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_synthetic_sample)->Arg(1)->Arg(0)->Arg(1)->Arg(0)->Unit(benchmark::kMicrosecond);
