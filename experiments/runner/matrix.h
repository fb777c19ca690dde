// matrix.h — experiment.json's matrix: validation and expansion into points.
// A spec holds one block or a list of blocks under "matrix"; each block is
//   {"name": "...", "command": "train" | "summary" | "estimate",
//    "options": {"flag": value, ...},                      fixed for every point
//    "axes": [{"name": "batch", "values": [1, 2, 4]}, ...]} swept, first axis slowest
// Values may be given per profile: {"quick": ..., "full": ...} (an option's value, or an
// axis's list). An axis value is a flag's value, or an object setting several flags at
// once ({"label": "vgg16", "model": "vgg16", "input": "3,224,224"}; "label" names the
// point). Flags are the command's own (experiments/cli/commands.h) without "--"; a
// switch is given as true. A value may name "{scratch}": a folder of the run's own that
// every point shares (a checkpoint one point saves and a later one resumes from); "{root}":
// the repository the experiment folder sits in (models/graphs/ files); the results keep
// the placeholders. The runner adds --json; the spec's "device" is passed as
// --device to commands that take it unless a block sets it.
// Contracts: any unknown key (top level, block, axis), flag, command or missing profile is
// a ValueError naming it and the spec; point names are unique.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oomlab {

struct PointSpec {
  std::string name;                                          // "estimate vgg16 sgd batch=4"
  std::string command;                                       // train | summary | estimate
  std::vector<std::pair<std::string, std::string>> flags;    // in order, values as text ("" = switch)
  nlohmann::json axes = nlohmann::json::object();            // axis name -> the value swept (json)
  nlohmann::json options = nlohmann::json::object();         // every flag given (json values)
  std::vector<std::string> args() const;                     // command, --flag, value, ...
};

// experiment.json's text parsed and checked before anything reads it: JSON nested at most
// kMaxSpecDepth levels (a deeper document is rejected while parsing, so no recursive walk
// can overflow the stack), an object, and the runner's keys with their types: name
// (string), title / claim / notes (strings), source (object), device (a device name),
// timeout_s (a positive number, or one per profile), matrix (an object or a list; its
// presence and contents are expand_matrix's to check).
// Errors are ValueErrors naming `where` (the file) and the key.
inline constexpr int kMaxSpecDepth = 64;
nlohmann::json parse_experiment_spec(std::string_view text, const std::string& where);

// A field of the spec a driver reads, as a dotted path ("source.totals.params") and the
// JSON type it must have: "object", "array", "string", "number", "positive" (a number
// > 0), "integer", "boolean".
struct SpecField { std::string path, type; };
// The field's value; ValueError naming `where`, the path and the expected type when it is
// missing or of another type.
const nlohmann::json& spec_field(const nlohmann::json& spec, const SpecField& field, const std::string& where);

// The top-level keys the runner itself reads (name, title, claim, source, device, matrix,
// timeout_s, notes).
const std::vector<std::string>& runner_spec_keys();

// Validates `spec` (runner keys + driver_keys) and expands its matrix for `profile`.
std::vector<PointSpec> expand_matrix(const nlohmann::json& spec, const std::string& profile,
                                     const std::vector<std::string>& driver_keys, const std::string& where);

// A per-profile value: value[profile] when value is {"quick": .., "full": ..}, else value.
const nlohmann::json& for_profile(const nlohmann::json& value, const std::string& profile, const std::string& what);

}  // namespace oomlab
