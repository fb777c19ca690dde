// experiment_runner_internal.h — runners that live outside experiment_runner.cpp (one
// file per experiment family); each fills `points` and returns the summary, and its
// verdict function turns the summary into {"status", "reason"}.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace oomlab {
bool model_is_transformer(const std::string& model);   // bert-* (token models)
nlohmann::json run_04(const nlohmann::json& spec, const std::string& profile, nlohmann::json& points);
nlohmann::json verdict_04(const nlohmann::json& spec, const nlohmann::json& summary);
}  // namespace oomlab
