// bench_checkpointing.cpp — Google Benchmark for activation checkpointing (issue bar):
// bert-mini, batch 32, seq 128, AdamW, one full training step on the CPU per iteration,
// for each --checkpoint policy, all in one process (none first, so every other policy's
// ratios are measured against it in the same run on the same machine):
//   BM_bert_mini_step/<policy>  counters: fwd_ms, bwd_ms (incl. recompute), step_ms
//     (mean per iteration), activation_MiB (bytes kept for backward after the forward:
//     allocated after minus before), peak_MiB (allocated peak of the step),
//     time_vs_none (step time / none's - 1), act_reduction_x (none's activations / this).
// Usage: ./bench_checkpointing [--benchmark_repetitions=3] [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <chrono>
#include <map>
#include <vector>

#include "engine/autograd/checkpoint.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/checkpoint_plan.h"
#include "engine/ops/loss.h"
#include "engine/optim/optimizer.h"
#include "engine/train/train_step.h"
#include "experiments/benchmarks/bench_context.h"
#include "models/model_zoo.h"

using namespace oomlab;

namespace {
const std::vector<std::string> kPolicies = {"none", "all", "every:2", "sqrt", "selective", "selective:core"};
std::map<std::string, std::pair<double, double>> g_none;   // step_ms, activation bytes of "none"

void BM_bert_mini_step(benchmark::State& st) {
  const std::string policy = kPolicies.at(size_t(st.range(0)));
  st.SetLabel(policy);
  reset_allocators();
  ModelConfig cfg = default_model_config("bert-mini");
  cfg.num_classes = 2;
  cfg.seq_len = 128;
  cfg.seed = 1;
  nn::ModulePtr model = build_model("bert-mini", cfg);
  apply_checkpoint_plan(*model, plan_checkpoints(*model, model_probe_input("bert-mini", cfg),
                                                 parse_checkpoint_policy(policy)));
  ParamGroup g;
  g.params = model->named_parameters();
  g.lr = 1e-4;
  g.weight_decay = 0.01;
  auto opt = make_optimizer("adamw", {g});
  const int64_t B = 32, T = 128;
  std::vector<int64_t> ids(static_cast<size_t>(B * T)), labels(static_cast<size_t>(B));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(1 + (i * 2654435761u) % 30000);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i % 2);
  Tensor x = tokens_to_device(ids.data(), {B, T}, cpu_device()), y = labels_to_device(labels.data(), B, cpu_device());
  CachingAllocator& al = allocator_for(cpu_device());
  double fwd = 0, bwd = 0, total = 0, act = 0;
  int64_t n = 0;
  for (auto _ : st) {
    using clock = std::chrono::steady_clock;
    opt->zero_grad();
    const int64_t before = al.stats().at("allocated_bytes.all.current");
    auto t0 = clock::now();
    Tensor loss = cross_entropy((*model)(x), y);
    auto t1 = clock::now();
    act = double(al.stats().at("allocated_bytes.all.current") - before);
    loss.backward();
    auto t2 = clock::now();
    opt->step();
    auto t3 = clock::now();
    loss = Tensor();
    fwd += std::chrono::duration<double>(t1 - t0).count();
    bwd += std::chrono::duration<double>(t2 - t1).count();
    total += std::chrono::duration<double>(t3 - t0).count();
    ++n;
  }
  const double step_ms = 1e3 * total / double(n);
  if (policy == "none") g_none["bert-mini"] = {step_ms, act};
  st.counters["fwd_ms"] = 1e3 * fwd / double(n);
  st.counters["bwd_ms"] = 1e3 * bwd / double(n);
  st.counters["step_ms"] = step_ms;
  st.counters["activation_MiB"] = act / 1048576.0;
  st.counters["peak_MiB"] = double(al.stats().at("allocated_bytes.all.peak")) / 1048576.0;
  if (g_none.count("bert-mini")) {
    st.counters["time_vs_none"] = step_ms / g_none["bert-mini"].first - 1.0;
    st.counters["act_reduction_x"] = act > 0 ? g_none["bert-mini"].second / act : 0.0;
  }
}
BENCHMARK(BM_bert_mini_step)->DenseRange(0, int(kPolicies.size()) - 1)->Unit(benchmark::kMillisecond)->Iterations(5);
}  // namespace

OOMLAB_BENCHMARK_MAIN(cpu_device())
