// torch_twin.h — the matrix's "torch" points: PyTorch's twin of an oomlab configuration,
// run as `python3 scripts/torch_bench.py TAG --steps S --warmup W` (the GPU kit's PyTorch
// side; its tags name the configurations) in a child process with the point's timeout.
// Contracts:
//  * Runs only on a cuda run: on any other device the point is "skipped" (PyTorch twins
//    measure a GPU) without starting Python.
//  * The record becomes the point's results in the runner's shape: metrics.step_time_s
//    {median, count} (seconds, as `oomlab train` reports), metrics.torch (the record whole)
//    and memory.devices["cuda:0"] {allocated / reserved peak: torch.cuda.max_memory_*}.
//  * A record with "error", no record, or a non-zero exit is the point's "error" outcome
//    with the message; nothing here throws for what the child does.
//  * Python: $OOMLAB_PYTHON, else python3 on PATH.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/launch/child_process.h"

namespace oomlab {

struct TwinResult {
  ChildOutcome outcome;
  nlohmann::json result = nlohmann::json::object();   // {"config", "metrics", "memory"}
};

// args: the point's flags without the command ("--tag", T, "--steps", S, ...); root: the
// repository (scripts/torch_bench.py); device: the run's device.
TwinResult run_torch_twin(const std::vector<std::string>& args, const std::string& root, const std::string& device,
                          double timeout_s, const std::string& work_prefix);

}  // namespace oomlab
