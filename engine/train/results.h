// results.h — the common pieces of every results JSON oomlab writes:
// schema_version, context (provenance) and memory (PyTorch stat names).
// Schema 2: memory is per logical device, {"devices": {"meta:1": {stats}}, "totals":
// {stats summed over the devices}}; for peaks the sum of the devices' own peaks (what the
// cards together must hold at their worst, an upper bound of any instant's total).
// context.devices maps each logical device to the physical one it ran on.
// Contract: values are finite (callers pass through finite_or_null for measured
// doubles); files are written with write_json_atomic (engine/io/atomic_file.h).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/device.h"

namespace oomlab {

inline constexpr int kResultsSchemaVersion = 2;

// git sha, build type, compiler, BLAS, host, cpu model, device (the first), devices
// (logical -> physical), date (UTC, ISO 8601), oomlab version, cuda compiled in.
nlohmann::json results_context(const std::vector<Device>& devices);
inline nlohmann::json results_context(const Device& device) { return results_context(std::vector<Device>{device}); }
// The PyTorch-named stats of a device's allocator (the keys users compare against
// torch.cuda.memory_stats()), plus capacity_bytes.
nlohmann::json memory_stats_json(const Device& device);
// {"of": what the stats cover, "devices": {name: memory_stats_json}, "totals": sums}
// (schema 2). `of` says which run the allocator's stats (peaks included) belong to when a
// command runs several (estimate: its steady-state step; summary: the training forward).
nlohmann::json memory_json(const std::vector<Device>& devices, const std::string& of);
// {"schema_version", "command", "context", "config", "metrics", "memory"}
nlohmann::json make_results(const std::string& command, const std::vector<Device>& devices, nlohmann::json config,
                            nlohmann::json metrics, const std::string& memory_of);
inline nlohmann::json make_results(const std::string& command, const Device& device, nlohmann::json config,
                                   nlohmann::json metrics, const std::string& memory_of) {
  return make_results(command, std::vector<Device>{device}, std::move(config), std::move(metrics), memory_of);
}
// median/p10/p90/mean of samples (empty -> zeros).
nlohmann::json summarize_times(std::vector<double> seconds);

}  // namespace oomlab
