// experiment_runner_internal.h — runners that live outside experiment_runner.cpp (one
// file per experiment family); each fills `points` and returns the summary, and its
// verdict function turns the summary into {"status", "reason"}. The verdicts of 01 and
// 02 are declared here too so tests can feed them data where the claim fails.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace oomlab {
bool model_is_transformer(const std::string& model);   // bert-* (token models)
// 01: spec = experiment.json, summary = run_01's {"layers", "totals"}.
nlohmann::json verdict_01(const nlohmann::json& spec, const nlohmann::json& summary);
// 02: points with metrics {model, optimizer, formula_error_pct, params/grads/optimizer_state/
// transient_bytes}, summary {"fits": [...]} as run_02 writes them.
nlohmann::json verdict_02(const nlohmann::json& points, const nlohmann::json& summary);
nlohmann::json run_04(const nlohmann::json& spec, const std::string& profile, nlohmann::json& points);
nlohmann::json verdict_04(const nlohmann::json& spec, const nlohmann::json& summary);
}  // namespace oomlab
