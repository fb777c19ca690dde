// fuzz_experiment_spec.cpp — libFuzzer target for experiment.json handling
// (experiments/runner/matrix.h): parse_experiment_spec(text, where), then
// expand_matrix(spec, profile, {}, where) for the "quick" and "full" profiles. Nothing runs:
// expansion only builds the points' command lines.
// Expected rejections: oomlab::Error (ValueError naming the spec and key) and
// nlohmann::json::parse_error. Findings: any other exception (e.g. a nlohmann type_error from
// reading a key of the wrong type), a stack overflow on deep nesting, a sanitizer report,
// or expanded points with another command than train/summary/estimate or duplicate names.
// Seeds: tests/fuzz/corpus/fuzz_experiment_spec/ (every experiments/*/experiment.json);
// dictionary: tests/fuzz/fuzz_experiment_spec.dict.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "experiments/runner/matrix.h"
#include "tests/fuzz/fuzz_common.h"

using oomlab_fuzz::fuzz_require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json spec;
  try {
    spec = oomlab::parse_experiment_spec(text, "fuzz/experiment.json");
  } catch (const oomlab::Error&) {
    return 0;
  } catch (const nlohmann::json::parse_error&) {
    return 0;
  }
  for (const char* profile : {"quick", "full"}) {
    try {
      const std::vector<oomlab::PointSpec> points = oomlab::expand_matrix(spec, profile, {}, "fuzz/experiment.json");
      std::set<std::string> names;
      for (const oomlab::PointSpec& p : points) {
        fuzz_require(names.insert(p.name).second, "expand_matrix: duplicate point names");
        fuzz_require(p.command == "train" || p.command == "summary" || p.command == "estimate",
                     "expand_matrix: a point whose command is not train/summary/estimate");
        fuzz_require(!p.args().empty() && p.args()[0] == p.command, "expand_matrix: args() does not start with the command");
      }
    } catch (const oomlab::Error&) {
    }
  }
  return 0;
}
