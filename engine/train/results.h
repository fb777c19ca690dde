// results.h — the common pieces of every results JSON oomlab writes:
// schema_version, context (provenance) and memory (PyTorch stat names).
// Contract: values are finite (callers pass through finite_or_null for measured
// doubles); files are written with write_json_atomic (engine/io/atomic_file.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "engine/core/device.h"

namespace oomlab {

inline constexpr int kResultsSchemaVersion = 1;

// git sha, build type, compiler, BLAS, host, cpu model, device, date (UTC, ISO 8601),
// oomlab version, cuda compiled in.
nlohmann::json results_context(const Device& device);
// The PyTorch-named stats of a device's allocator (the keys users compare against
// torch.cuda.memory_stats()).
nlohmann::json memory_stats_json(const Device& device);
// {"schema_version", "command", "context", "config", "metrics", "memory"}
nlohmann::json make_results(const std::string& command, const Device& device, nlohmann::json config,
                            nlohmann::json metrics);
// median/p10/p90/mean of samples (empty -> zeros).
nlohmann::json summarize_times(std::vector<double> seconds);

}  // namespace oomlab
