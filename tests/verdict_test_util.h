// verdict_test_util.h — what the verdict tests share (tests/test_verdicts*.cpp): an
// experiment's spec, its committed summary, and its driver's verdict on a summary.
#pragma once
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "experiments/runner/matrix.h"
#include "experiments/runner/registry.h"

namespace oomlab {
using json = nlohmann::json;

inline std::string read_text_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
inline json spec_of(const std::string& name) {
  const std::string path = std::string(OOMLAB_SOURCE_DIR) + "/experiments/" + name + "/experiment.json";
  return parse_experiment_spec(read_text_file(path), path);
}
inline json committed_summary(const std::string& name) {
  return json::parse(read_text_file(std::string(OOMLAB_SOURCE_DIR) + "/reports/results/" + name + ".json"))["summary"];
}
inline std::string status(const std::string& name, const json& summary) {
  return experiment_driver(name).verdict(spec_of(name), summary)["status"].get<std::string>();
}
inline std::string reason(const std::string& name, const json& summary) {
  return experiment_driver(name).verdict(spec_of(name), summary)["reason"].get<std::string>();
}


}  // namespace oomlab
