// bench_checkpointing.cpp — Google Benchmark for activation checkpointing (issue bar):
// bert-mini, batch 32, seq 128, AdamW, one full training step on the CPU per iteration,
// for each --checkpoint policy, paired with a no-checkpoint twin stepped in the same
// iteration (see BM_bert_mini_step):
//   BM_bert_mini_step/<policy>  counters: fwd_ms, bwd_ms (incl. recompute), step_ms
//     (mean per iteration), none_step_ms (the twin's), time_vs_none (summed step times,
//     policy / twin - 1), activation_MiB (bytes kept for backward after the forward:
//     allocated after minus before), act_reduction_x (the twin's kept bytes / this).
// Usage: ./bench_checkpointing [--benchmark_repetitions=3] [--benchmark_format=json]
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <memory>
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

struct Stepper {   // a bert-mini with a plan, its AdamW, and one fixed batch
  nn::ModulePtr model;
  std::unique_ptr<Optimizer> opt;
  Tensor x, y;
  Stepper(const std::string& policy) {
    ModelConfig cfg = default_model_config("bert-mini");
    cfg.num_classes = 2;
    cfg.seq_len = 128;
    cfg.seed = 1;
    model = build_model("bert-mini", cfg);
    apply_checkpoint_plan(*model, plan_checkpoints(*model, model_probe_input("bert-mini", cfg),
                                                   parse_checkpoint_policy(policy)));
    ParamGroup g;
    g.params = model->named_parameters();
    g.lr = 1e-4;
    g.weight_decay = 0.01;
    opt = make_optimizer("adamw", {g});
    const int64_t B = 32, T = 128;
    std::vector<int64_t> ids(static_cast<size_t>(B * T)), labels(static_cast<size_t>(B));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(1 + (i * 2654435761u) % 30000);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i % 2);
    x = tokens_to_device(ids.data(), {B, T}, cpu_device());
    y = labels_to_device(labels.data(), B, cpu_device());
  }
  // One step; returns {forward s, backward s, whole step s, bytes kept after forward}.
  std::array<double, 4> step() {
    using clock = std::chrono::steady_clock;
    CachingAllocator& al = allocator_for(cpu_device());
    opt->zero_grad();
    const int64_t before = al.stats().at("allocated_bytes.all.current");
    auto t0 = clock::now();
    Tensor loss = cross_entropy((*model)(x), y);
    auto t1 = clock::now();
    const double kept = double(al.stats().at("allocated_bytes.all.current") - before);
    loss.backward();
    auto t2 = clock::now();
    opt->step();
    auto t3 = clock::now();
    auto s = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    return {s(t0, t1), s(t1, t2), s(t0, t3), kept};
  }
};

// Each iteration steps the policy's model, then a no-checkpoint twin (same init, same
// batch): the ratio of their summed step times is paired, so slow phases of a shared
// machine hit both sides alike (policy "none" against its twin shows the noise floor).
void BM_bert_mini_step(benchmark::State& st) {
  const std::string policy = kPolicies.at(size_t(st.range(0)));
  st.SetLabel(policy);
  reset_allocators();
  Stepper a(policy), ref("none");
  a.step();   // warm-up: the allocator's pools and OpenBLAS's threads
  ref.step();
  double fwd = 0, bwd = 0, total = 0, ref_total = 0, kept = 0, ref_kept = 0;
  int64_t n = 0;
  for (auto _ : st) {
    const auto r = a.step();
    st.PauseTiming();
    const auto q = ref.step();
    st.ResumeTiming();
    fwd += r[0]; bwd += r[1]; total += r[2]; kept = r[3];
    ref_total += q[2]; ref_kept = q[3];
    ++n;
  }
  st.counters["fwd_ms"] = 1e3 * fwd / double(n);
  st.counters["bwd_ms"] = 1e3 * bwd / double(n);
  st.counters["step_ms"] = 1e3 * total / double(n);
  st.counters["none_step_ms"] = 1e3 * ref_total / double(n);
  st.counters["time_vs_none"] = total / ref_total - 1.0;
  st.counters["activation_MiB"] = kept / 1048576.0;
  st.counters["act_reduction_x"] = kept > 0 ? ref_kept / kept : 0.0;
}
BENCHMARK(BM_bert_mini_step)->DenseRange(0, int(kPolicies.size()) - 1)->Unit(benchmark::kMillisecond)->Iterations(6);
}  // namespace

OOMLAB_BENCHMARK_MAIN(cpu_device())
