// bench_context.h — oomlab's provenance in Google Benchmark's JSON `context` block: the
// keys of results_context(device) (git_sha, git_dirty, build_type, compiler, blas, cpu,
// device, and for accelerators the device properties: name, CUDA/cuBLAS/cuDNN versions,
// TF32 switches) as custom context entries prefixed "oomlab_". Debian's libbenchmark
// reports its own library_build_type ("debug"); oomlab_build_type is ours.
// OOMLAB_BENCHMARK_MAIN(device) replaces BENCHMARK_MAIN() and adds them first.
#pragma once
#include <benchmark/benchmark.h>

#include <string>

#include "engine/train/results.h"

namespace oomlab {
inline void add_benchmark_context(const Device& device) {
  nlohmann::json ctx;
  try {
    ctx = results_context(device);
  } catch (const std::exception&) {   // e.g. no usable CUDA device: describe the host only
    ctx = results_context(cpu_device());
    ctx["device"] = device.str();
  }
  for (auto& [k, v] : ctx.items()) {
    if (v.is_object()) {
      for (auto& [k2, v2] : v.items())
        benchmark::AddCustomContext("oomlab_" + k2, v2.is_string() ? v2.get<std::string>() : v2.dump());
    } else {
      benchmark::AddCustomContext("oomlab_" + k, v.is_string() ? v.get<std::string>() : v.dump());
    }
  }
}
}  // namespace oomlab

#define OOMLAB_BENCHMARK_MAIN(device)                                   \
  int main(int argc, char** argv) {                                     \
    ::oomlab::add_benchmark_context(device);                            \
    benchmark::Initialize(&argc, argv);                                 \
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;   \
    benchmark::RunSpecifiedBenchmarks();                                \
    benchmark::Shutdown();                                              \
    return 0;                                                           \
  }
