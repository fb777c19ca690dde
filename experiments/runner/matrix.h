// matrix.h — experiment.json's matrix: validation and expansion into points.
// A spec holds one block or a list of blocks under "matrix"; each block is
//   {"name": "...", "command": "train" | "summary" | "estimate",
//    "options": {"flag": value, ...},                      fixed for every point
//    "axes": [{"name": "batch", "values": [1, 2, 4]}, ...], swept, first axis slowest
//    "profiles": ["gpu"],                                  the profiles it belongs to
//                                                          (default: quick and full)
//    "rounds": 5,                                          repeat it, alternating (below)
//    "keep_device": true,                                  its device survives --device
//    "interleave": "twins",                                alternate with the next blocks
//    "gpu_only": true}                                     skipped on a run off a GPU
// Profiles: quick (minutes), full (the committed results), gpu (the points that answer the
// claims about a GPU: run with --device cuda, or on meta as a dry run). Values may be given
// per profile: {"quick": ..., "full": ...} (an option's value, or an axis's list).
// "rounds": N adds a first (slowest) axis "round" = 1..N that sets no flag, so the block's
// points run A, B, A, B, ...: the alternating pairs timing claims are judged from
// (verdict_rule.h); consecutive blocks naming one "interleave" group run round by round
// (round 1 of each, then round 2, ...), so oomlab alternates with its PyTorch twin. Commands: train, summary, estimate,
// trick, allreduce-bench, and "torch": a PyTorch twin (scripts/torch_bench.py; options tag, steps, warmup) that runs on
// a GPU only. An axis value is a flag's value, or an object setting several flags at once ({"label": "vgg16", "model":
// "vgg16", "input": "3,224,224"}; "label" names the point). Flags are the command's own (experiments/cli/commands.h)
// without "--"; a switch is given as true. A value may name "{scratch}": a folder of the run's own that every point
// shares (a checkpoint one point saves and a later one resumes from); "{root}": the repository the experiment folder
// sits in (models/graphs/ files); the results keep the placeholders. The runner adds --json. Devices: a command that
// takes --device gets the run's device (run_device) unless its block sets one; a run given a device (`oomlab run
// --device D`) overrides every block's device too, except a block with "keep_device" (the
// meta predictions beside a GPU's measurements). Such a run (or the gpu profile) placing a
// point on cpu or meta leaves out the flags that apply only on cuda (--allow-tf32,
// --cudnn-benchmark ...: a dry run) and names them in PointSpec::dropped.
// Contracts: any unknown key (top level, block, axis), flag, command or missing profile is
// a ValueError naming it and the spec; point names are unique.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "experiments/cli/commands.h"

namespace oomlab {

struct PointSpec {
  std::string name;                                          // "estimate vgg16 sgd batch=4"
  std::string block;                                         // its block's name
  std::vector<std::string> dropped;                          // CUDA-only flags left out off a GPU
  bool gpu_only = false;                                     // "skipped" on a run off a GPU
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
// timeout_s, notes, expected_points, gpu_claims).
const std::vector<std::string>& runner_spec_keys();

// The profiles a run may ask for.
const std::vector<std::string>& profile_names();   // quick, full, gpu

// The run's device: `override` ("" = none), else cuda for the gpu profile, else the spec's
// "device" (default cpu).
std::string run_device(const nlohmann::json& spec, const std::string& profile, const std::string& override);

// Validates `spec` (runner keys + driver_keys) and expands its matrix for `profile`;
// `device_override` is `oomlab run --device`'s value ("" = none). A profile none of the
// blocks belongs to is a ValueError naming the profiles the spec has.
std::vector<PointSpec> expand_matrix(const nlohmann::json& spec, const std::string& profile,
                                     const std::vector<std::string>& driver_keys, const std::string& where,
                                     const std::string& device_override = "");

// The flags of a matrix command: command_flags() (experiments/cli/commands.h), and the
// torch twin's own (tag, steps, warmup).
const CommandFlags& matrix_command_flags(const std::string& command);

// A per-profile value: value[profile] when value is {"quick": .., "full": ..}, else value.
const nlohmann::json& for_profile(const nlohmann::json& value, const std::string& profile, const std::string& what);

}  // namespace oomlab
