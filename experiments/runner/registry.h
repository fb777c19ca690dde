// registry.h — what is specific to an experiment: its summary and verdict, registered by
// name from a driver.cpp next to its experiment.json (OOMLAB_REGISTER_EXPERIMENT). The
// runner (experiment_runner.h) looks drivers up by the spec's "name"; nothing branches on
// experiment names. A folder without a driver runs under the generic one: its summary
// counts the points' outcomes, its verdict is "inconclusive" (no driver judges the claim),
// and the report shows its points table.
// Contracts:
//  * summarize(spec, points) reads the points' outcomes, config, metrics and memory (the
//    children's own results) and returns the experiment's summary object. It may trim
//    bulky per-point data it has digested (e.g. per-layer tables repeated per point).
//    A point whose outcome is not "ok" or "oom" has empty metrics; drivers say in the
//    summary what they could not compute.
//  * verdict(spec, summary) returns {"status": confirmed|refuted|depends|inconclusive|pending GPU,
//    "reason"} under the shared rule (verdict_rule.h: verdict_status), every
//    number in the reason taken from the summary.
//  * spec_fields: the fields of the spec it reads (e.g. {"source.totals.params", "number"}),
//    checked by the runner before any point runs: a missing or mistyped one is a
//    ValueError naming the file, the key and the type.
//  * spec_keys: top-level experiment.json keys the driver reads besides the runner's own
//    (runner_spec_keys()); any other key is an error naming it.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/runner/matrix.h"

namespace oomlab {

struct ExperimentDriver {
  std::string name;   // the spec's "name", e.g. "02_memory_vs_batch"
  std::function<nlohmann::json(const nlohmann::json& spec, nlohmann::json& points)> summarize;
  std::function<nlohmann::json(const nlohmann::json& spec, const nlohmann::json& summary)> verdict;
  std::vector<std::string> spec_keys;
  std::vector<SpecField> spec_fields;
};

// Called from static initialisers (the app library is linked whole-archive); returns true.
bool register_experiment(ExperimentDriver driver);
// The driver registered for `name`, or the generic driver when none is.
const ExperimentDriver& experiment_driver(const std::string& name);

#define OOMLAB_REGISTER_EXPERIMENT(...) \
  [[maybe_unused]] static const bool oomlab_experiment_registered_ = ::oomlab::register_experiment(__VA_ARGS__)

}  // namespace oomlab
