// fuzz_experiment_spec.cpp — libFuzzer target for experiment.json handling
// (experiments/runner/matrix.h): parse_experiment_spec(text, where), then
// expand_matrix(spec, profile, {}, where) for the "quick", "full" and "gpu" profiles (gpu also
// with --device meta), and the gpu profile's claims checked (check_gpu_claims). Nothing runs:
// expansion only builds the points' command lines.
// Expected rejections: oomlab::Error (ValueError naming the spec and key) and
// nlohmann::json::parse_error. Findings: any other exception (e.g. a nlohmann type_error from
// reading a key of the wrong type), a stack overflow on deep nesting, a sanitizer report,
// or expanded points with a command the matrix does not know or duplicate names.
// Seeds: tests/fuzz/corpus/fuzz_experiment_spec/ (every experiments/*/experiment.json);
// dictionary: tests/fuzz/fuzz_experiment_spec.dict.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "experiments/runner/gpu_claims.h"
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
  static const std::set<std::string> commands = {"train", "summary", "estimate", "trick", "allreduce-bench", "torch"};
  for (const auto& [profile, device] : {std::pair{"quick", ""}, {"full", ""}, {"gpu", ""}, {"gpu", "meta"}}) {
    try {
      const std::vector<oomlab::PointSpec> points =
          oomlab::expand_matrix(spec, profile, {}, "fuzz/experiment.json", device);
      if (std::string(profile) == "gpu") oomlab::check_gpu_claims(spec, points, "fuzz/experiment.json");
      std::set<std::string> names;
      for (const oomlab::PointSpec& p : points) {
        fuzz_require(names.insert(p.name).second, "expand_matrix: duplicate point names");
        fuzz_require(commands.count(p.command) == 1, "expand_matrix: a point whose command the matrix does not know");
        fuzz_require(!p.args().empty() && p.args()[0] == p.command,
                     "expand_matrix: args() does not start with the command");
      }
    } catch (const oomlab::Error&) {
    }
  }
  return 0;
}
