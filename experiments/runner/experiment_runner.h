// experiment_runner.h — `oomlab run experiments/NN_name`: reads experiment.json, runs
// every point of the matrix with fresh allocators, and writes
// reports/results/NN_name.json (schema in README.md) atomically.
#pragma once
#include <string>

namespace oomlab {
// Returns the path written. profile: quick | full. out: "" -> reports/results/<name>.json
// next to the experiments folder's parent.
std::string run_experiment(const std::string& dir, const std::string& profile, const std::string& out);
}  // namespace oomlab
