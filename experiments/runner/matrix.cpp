// matrix.cpp — experiment matrix validation and expansion (matrix.h).
#include "experiments/runner/matrix.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/flag_table.h"

namespace oomlab {
using json = nlohmann::json;

namespace {
const char* const kProfiles[] = {"quick", "full", "gpu"};
constexpr int kMaxRounds = 99;

bool is_profile_map(const json& v) {
  if (!v.is_object() || v.empty()) return false;
  for (auto it = v.begin(); it != v.end(); ++it)
    if (std::find(std::begin(kProfiles), std::end(kProfiles), it.key()) == std::end(kProfiles)) return false;
  return true;
}

void check_keys(const json& obj, const std::vector<std::string>& allowed, const std::string& what) {
  OOMLAB_CHECK(obj.is_object(), what, " must be an object");
  for (auto it = obj.begin(); it != obj.end(); ++it)
    OOMLAB_CHECK(std::find(allowed.begin(), allowed.end(), it.key()) != allowed.end(), what, ": unknown key \"",
                 it.key(), "\" (allowed: ", [&] {
                   std::string s;
                   for (const auto& k : allowed) s += (s.empty() ? "" : ", ") + k;
                   return s;
                 }(), ")");
}

// A flag value as command-line text ("" for a switch given as true).
std::string flag_text(const json& v, const std::string& what) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) {
    OOMLAB_CHECK(v.get<bool>(), what, ": a switch is given as true (leave it out for false)");
    return "";
  }
  if (v.is_number_integer()) return v.dump();
  if (v.is_number_float()) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v.get<double>());
    return buf;
  }
  if (v.is_array() && !v.empty() &&
      std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_number_integer(); })) {
    std::string s;
    for (const auto& e : v) s += (s.empty() ? "" : ",") + e.dump();
    return s;   // "3,224,224"
  }
  throw ValueError(str_cat(what, ": a flag value must be a string, number, true or a list of integers (got ",
                           v.dump(), ")"));
}

bool has_type(const json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "positive") return v.is_number() && v.get<double>() > 0;
  if (type == "integer") return v.is_number_integer();
  if (type == "boolean") return v.is_boolean();
  throw InternalError(str_cat("spec_field: unknown JSON type '", type, "'"));
}

std::string type_name(const json& v) {
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_null()) return "null";
  return v.is_object() ? "an object" : "a list";
}

std::string label_of(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}
}  // namespace

namespace {
// spec[key], when present, is accepted by `ok`, or is one such value per profile.
void check_per_profile(const json& spec, const char* key, const std::string& where, const char* what,
                       bool (*ok)(const json&)) {
  if (!spec.contains(key)) return;
  for (const char* profile : kProfiles) {
    if (is_profile_map(spec[key]) && !spec[key].contains(profile)) continue;   // asked for only when that profile runs
    const json& v = for_profile(spec[key], profile, str_cat(where, ": ", key));
    OOMLAB_CHECK(ok(v), where, ": \"", key, "\" must be ", what, " (or one per profile), got ", v.dump());
  }
}
}  // namespace

json parse_experiment_spec(std::string_view text, const std::string& where) {
  json spec;
  try {
    spec = json::parse(text, [&](int depth, json::parse_event_t, json&) {
      OOMLAB_CHECK(depth <= kMaxSpecDepth, where, ": JSON nested deeper than ", kMaxSpecDepth, " levels");
      return true;
    });
  } catch (const json::exception& e) {
    throw ValueError(str_cat(where, ": invalid JSON: ", e.what()));
  }
  OOMLAB_CHECK(spec.is_object(), where, ": the spec must be a JSON object (got ", type_name(spec), ")");
  spec_field(spec, {"name", "string"}, where);
  OOMLAB_CHECK(!spec["name"].get<std::string>().empty(), where, ": \"name\" is empty");
  OOMLAB_CHECK(!spec.contains("matrix") || spec["matrix"].is_object() || spec["matrix"].is_array(), where,
               ": \"matrix\" must be an object or a list of objects (got ", type_name(spec["matrix"]), ")");
  for (const char* k : {"title", "claim", "notes", "device"})
    if (spec.contains(k)) spec_field(spec, {k, "string"}, where);
  if (spec.contains("source")) spec_field(spec, {"source", "object"}, where);
  if (spec.contains("device")) {
    try {
      parse_device(spec["device"].get<std::string>());
    } catch (const Error& e) {
      throw ValueError(str_cat(where, ": \"device\": ", e.what()));
    }
  }
  check_per_profile(spec, "timeout_s", where, "a positive number of seconds",
                    [](const json& t) { return t.is_number() && t.get<double>() > 0 && t.get<double>() <= 1e9; });
  check_per_profile(spec, "expected_points", where, "a count of points",
                    [](const json& n) { return n.is_number_unsigned() && n.get<uint64_t>() <= 1000000; });
  return spec;
}

const json& spec_field(const json& spec, const SpecField& field, const std::string& where) {
  const json* j = &spec;
  size_t pos = 0;
  while (true) {
    const size_t dot = field.path.find('.', pos);
    const std::string key = field.path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const std::string so_far = field.path.substr(0, dot);
    OOMLAB_CHECK(j->is_object() && j->contains(key), where, ": missing key \"", so_far, "\" (",
                 field.type.empty() ? std::string("needed") : "expected " + field.type, ")");
    j = &(*j)[key];
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  OOMLAB_CHECK(field.type.empty() || has_type(*j, field.type), where, ": \"", field.path, "\" must be ",
               field.type == "integer" || field.type == "array" || field.type == "object" ? "an " : "a ",
               field.type == "positive" ? "positive number" : field.type, " (got ",
               field.type == "positive" && j->is_number() ? j->dump() : type_name(*j), ")");
  return *j;
}

std::vector<std::string> PointSpec::args() const {
  std::vector<std::string> a = {command};
  for (const auto& [k, v] : flags) {
    a.push_back("--" + k);
    if (!v.empty() || !matrix_command_flags(command).switches.count(k)) a.push_back(v);
  }
  return a;
}

const std::vector<std::string>& runner_spec_keys() {
  static const std::vector<std::string> keys = {"name",   "title",     "claim", "source",         "device",
                                                "matrix", "timeout_s", "notes", "expected_points",
                                                "gpu_claims"};
  return keys;
}

const std::vector<std::string>& profile_names() {
  static const std::vector<std::string> names(std::begin(kProfiles), std::end(kProfiles));
  return names;
}

std::string run_device(const json& spec, const std::string& profile, const std::string& override) {
  if (!override.empty()) return override;
  if (profile == "gpu") return "cuda";
  return spec.value("device", std::string("cpu"));
}

const CommandFlags& matrix_command_flags(const std::string& command) {
  static const CommandFlags torch{{"tag", "steps", "warmup"}, {}};
  return command == "torch" ? torch : command_flags(command);
}

const json& for_profile(const json& value, const std::string& profile, const std::string& what) {
  if (!is_profile_map(value)) return value;
  OOMLAB_CHECK(value.contains(profile), what, ": no value for profile '", profile, "'");
  return value[profile];
}

namespace {
using Axes = std::vector<std::pair<std::string, std::vector<json>>>;   // (name, values for this profile)
using FlagValues = std::vector<std::pair<std::string, json>>;

void check_matrix_flag(const CommandFlags& cf, const std::string& command, const std::string& flag,
                       const std::string& what) {
  OOMLAB_CHECK(flag != "json", what, ": --json is the runner's");
  OOMLAB_CHECK(cf.valued.count(flag) || cf.switches.count(flag), what, ": '", command, "' has no flag --", flag);
}

FlagValues block_options(const json& b, const std::string& bwhere, const std::string& profile, const CommandFlags& cf,
                         const std::string& command) {
  FlagValues fixed;
  if (!b.contains("options")) return fixed;
  OOMLAB_CHECK(b["options"].is_object(), bwhere, ".options must be an object");
  for (auto it = b["options"].begin(); it != b["options"].end(); ++it) {
    const std::string what = bwhere + ".options." + it.key();
    check_matrix_flag(cf, command, it.key(), what);
    fixed.emplace_back(it.key(), for_profile(it.value(), profile, what));
  }
  return fixed;
}

Axes block_axes(const json& b, const std::string& bwhere, const std::string& profile, const CommandFlags& cf,
                const std::string& command) {
  Axes axes;
  if (!b.contains("axes")) return axes;
  OOMLAB_CHECK(b["axes"].is_array(), bwhere, ".axes must be a list of {\"name\", \"values\"}");
  for (size_t ai = 0; ai < b["axes"].size(); ++ai) {
    const json& ax = b["axes"][ai];
    const std::string awhere = str_cat(bwhere, ".axes[", ai, "]");
    check_keys(ax, {"name", "values"}, awhere);
    OOMLAB_CHECK(ax.contains("name") && ax["name"].is_string() && ax.contains("values"), awhere,
                 " needs \"name\" and \"values\"");
    OOMLAB_CHECK(ax["name"] != "round", awhere, ": \"round\" is the runner's axis (give the block \"rounds\": N)");
    const json& vals = for_profile(ax["values"], profile, awhere + ".values");
    OOMLAB_CHECK(vals.is_array() && !vals.empty(), awhere, ".values must be a non-empty list");
    for (const json& v : vals) {
      if (v.is_object()) {
        for (auto it = v.begin(); it != v.end(); ++it)
          if (it.key() != "label") check_matrix_flag(cf, command, it.key(), awhere + " value " + v.dump());
      } else {
        check_matrix_flag(cf, command, ax["name"].get<std::string>(), awhere);
      }
    }
    axes.emplace_back(ax["name"].get<std::string>(), vals.get<std::vector<json>>());
  }
  return axes;
}

// Consecutive blocks of one "interleave" group run round by round: round 1 of each block in
// order, then round 2 ...: oomlab and its PyTorch twin alternate (matrix.h).
void interleave_rounds(std::vector<PointSpec>& points, const std::vector<std::string>& groups) {
  for (size_t i = 0; i < points.size();) {
    size_t j = i + 1;
    while (j < points.size() && !groups[i].empty() && groups[j] == groups[i]) ++j;
    std::stable_sort(points.begin() + long(i), points.begin() + long(j), [](const PointSpec& a, const PointSpec& b) {
      return a.axes.value("round", 0) < b.axes.value("round", 0);
    });
    i = j;
  }
}

// A block's "rounds" (matrix.h): the axis "round" = 1..N, or none.
void add_rounds_axis(const json& b, const std::string& bwhere, Axes& axes) {
  if (!b.contains("rounds")) return;
  const json& n = b["rounds"];
  OOMLAB_CHECK(n.is_number_unsigned() && n.get<uint64_t>() >= 1 && n.get<uint64_t>() <= kMaxRounds, bwhere,
               ": \"rounds\" must be a count from 1 to ", kMaxRounds, " (got ", n.dump(), ")");
  std::vector<json> rounds;
  for (uint64_t r = 1; r <= n.get<uint64_t>(); ++r) rounds.push_back(r);
  axes.insert(axes.begin(), {"round", rounds});
}

// The profiles a block belongs to ("profiles", default quick and full).
std::vector<std::string> block_profiles(const json& b, const std::string& bwhere) {
  if (!b.contains("profiles")) return {"quick", "full"};
  const json& ps = b["profiles"];
  OOMLAB_CHECK(ps.is_array() && !ps.empty(), bwhere, ": \"profiles\" must be a non-empty list of profile names");
  std::vector<std::string> out;
  for (const json& p : ps) {
    OOMLAB_CHECK(p.is_string() && std::find(std::begin(kProfiles), std::end(kProfiles), p.get<std::string>()) !=
                                      std::end(kProfiles),
                 bwhere, ": \"profiles\": unknown profile ", p.dump(), " (quick, full or gpu)");
    out.push_back(p);
  }
  return out;
}

// The point's device: the block's own (an option or an axis value) unless the run was given
// one and the block does not keep its own; the run's device when the block names none.
void set_device(FlagValues& flags, const std::string& device, bool override_block) {
  auto it = std::find_if(flags.begin(), flags.end(), [](const auto& f) { return f.first == "device"; });
  if (it == flags.end()) flags.emplace_back("device", device);
  else if (override_block) it->second = device;
}

// A flag of `command` that applies only with --device cuda (--allow-tf32, --cudnn-benchmark ...).
bool cuda_only_flag(const std::string& command, const std::string& flag) {
  for (const FlagSpec& f : flag_table()) {
    if (f.name != flag || std::find(f.commands.begin(), f.commands.end(), command) == f.commands.end()) continue;
    for (const FlagRule& r : f.applies_when)
      if (r.flag == "device" && r.values == std::vector<std::string>{"cuda"}) return true;
  }
  return false;
}

// A run given a device (or the gpu profile) moves a point written for a GPU onto cpu or meta
// (a dry run): its CUDA-only numerics flags are dropped there, and named in the point.
void drop_cuda_only_flags(FlagValues& flags, const std::string& command, PointSpec& p) {
  const auto dev = std::find_if(flags.begin(), flags.end(), [](const auto& f) { return f.first == "device"; });
  if (dev == flags.end() || !dev->second.is_string() ||
      parse_device(dev->second.get<std::string>()).type == DeviceType::cuda)
    return;
  for (auto it = flags.begin(); it != flags.end();) {
    if (cuda_only_flag(command, it->first)) {
      p.dropped.push_back(it->first);
      it = flags.erase(it);
    } else {
      ++it;
    }
  }
}

// The point at axis indexes `idx`: its flags (fixed options, then one value per axis; the
// device set_device chose), name and recorded axes.
PointSpec make_point(const json& b, const std::string& bwhere, const std::string& command, const CommandFlags& cf,
                     const FlagValues& fixed, const Axes& axes, const std::vector<size_t>& idx,
                     const std::string& device, bool override_device, bool may_drop) {
  PointSpec p;
  p.command = command;
  p.block = b.value("name", command);
  FlagValues flags = fixed;
  std::string name = b.value("name", command);
  for (size_t a = 0; a < axes.size(); ++a) {
    const json& v = axes[a].second[idx[a]];
    if (axes[a].first == "round") {   // the runner's: sets no flag
      p.axes["round"] = v;
      name += " round=" + v.dump();
      continue;
    }
    p.axes[axes[a].first] = v.is_object() && v.contains("label") ? v["label"] : v;
    if (v.is_object()) {
      for (auto it = v.begin(); it != v.end(); ++it)
        if (it.key() != "label") flags.emplace_back(it.key(), it.value());
      name += " " + (v.contains("label") ? label_of(v["label"]) : label_of(v));
    } else {
      flags.emplace_back(axes[a].first, v);
      name += " " + axes[a].first + "=" + label_of(v);
    }
  }
  if (cf.valued.count("device")) set_device(flags, device, override_device);
  if (may_drop) drop_cuda_only_flags(flags, command, p);
  std::set<std::string> seen;
  for (const auto& [k, v] : flags) {
    OOMLAB_CHECK(seen.insert(k).second, bwhere, ": point '", name, "' sets --", k, " twice");
    p.flags.emplace_back(k, flag_text(v, bwhere + " --" + k));
    p.options[k] = v;
  }
  p.name = name;
  return p;
}
// The most points one run expands: far above any experiment (the largest has 60), low
// enough that a mistyped matrix is refused before it is expanded in memory.
constexpr uint64_t kMaxPoints = 100000;

// Refuses a block whose product of axis lengths (added to `so_far`) exceeds kMaxPoints,
// before any point is made.
void check_point_count(const Axes& axes, size_t so_far, const std::string& bwhere) {
  uint64_t n = 1;
  for (const auto& [name, values] : axes) {
    n *= values.size();
    OOMLAB_CHECK(n + so_far <= kMaxPoints, bwhere, ": the matrix expands to more than ", kMaxPoints,
                 " points (axis '", name, "' has ", values.size(), " values); split it into several experiments");
  }
}
}  // namespace

std::vector<PointSpec> expand_matrix(const json& spec, const std::string& profile,
                                     const std::vector<std::string>& driver_keys, const std::string& where,
                                     const std::string& device_override) {
  std::vector<std::string> top = runner_spec_keys();
  top.insert(top.end(), driver_keys.begin(), driver_keys.end());
  check_keys(spec, top, where);
  OOMLAB_CHECK(spec.contains("matrix"), where, ": missing \"matrix\"");
  const json blocks = spec["matrix"].is_array() ? spec["matrix"] : json::array({spec["matrix"]});
  OOMLAB_CHECK(!blocks.empty(), where, ": \"matrix\" is empty");
  const std::string device = run_device(spec, profile, device_override);
  std::vector<PointSpec> points;
  std::set<std::string> names, spec_profiles;
  std::vector<std::string> groups;   // each point's block's "interleave" group ("" = none)
  for (size_t bi = 0; bi < blocks.size(); ++bi) {
    const json& b = blocks[bi];
    const std::string bwhere = str_cat(where, ": matrix[", bi, "]");
    check_keys(b, {"name", "command", "options", "axes", "profiles", "rounds", "keep_device", "interleave", "gpu_only"},
               bwhere);
    OOMLAB_CHECK(!b.contains("gpu_only") || b["gpu_only"].is_boolean(), bwhere, ": \"gpu_only\" must be true or false");
    OOMLAB_CHECK(!b.contains("interleave") || (b["interleave"].is_string() && b.contains("rounds")), bwhere,
                 ": \"interleave\" names a group of blocks with \"rounds\" (a string)");
    OOMLAB_CHECK(b.contains("command") && b["command"].is_string(), bwhere, ": missing \"command\"");
    OOMLAB_CHECK(!b.contains("name") || b["name"].is_string(), bwhere, ": \"name\" must be a string");
    OOMLAB_CHECK(!b.contains("keep_device") || b["keep_device"].is_boolean(), bwhere,
                 ": \"keep_device\" must be true or false");
    const std::vector<std::string> profiles = block_profiles(b, bwhere);
    spec_profiles.insert(profiles.begin(), profiles.end());
    if (std::find(profiles.begin(), profiles.end(), profile) == profiles.end()) continue;
    const std::string command = b["command"];
    const CommandFlags& cf = matrix_command_flags(command);
    const FlagValues fixed = block_options(b, bwhere, profile, cf, command);
    Axes axes = block_axes(b, bwhere, profile, cf, command);
    add_rounds_axis(b, bwhere, axes);
    check_point_count(axes, points.size(), bwhere);
    const bool override_device = !device_override.empty() && !b.value("keep_device", false);
    std::vector<size_t> idx(axes.size(), 0);   // the product, first axis slowest
    while (true) {
      PointSpec p = make_point(b, bwhere, command, cf, fixed, axes, idx, device, override_device,
                               !device_override.empty() || profile == "gpu");
      OOMLAB_CHECK(names.insert(p.name).second, bwhere, ": two points are named '", p.name,
                   "' (give the blocks distinct \"name\"s)");
      p.gpu_only = command == "torch" || b.value("gpu_only", false);
      points.push_back(std::move(p));
      groups.push_back(b.value("interleave", std::string()));
      size_t a = axes.size();
      while (a > 0 && ++idx[a - 1] == axes[a - 1].second.size()) idx[--a] = 0;
      if (a == 0) break;
    }
  }
  interleave_rounds(points, groups);
  OOMLAB_CHECK(
      !points.empty(), where, ": no block of the matrix belongs to the '", profile, "' profile (it has: ",
      [&] {
        std::string s;
        for (const std::string& p : spec_profiles) s += (s.empty() ? "" : ", ") + p;
        return s;
      }(),
      ")");
  if (spec.contains("expected_points")) {   // the folder's own count: a matrix edit that changes it is caught
    const json& n = for_profile(spec["expected_points"], profile, where + ": expected_points");
    OOMLAB_CHECK(n.is_number_unsigned() && n.get<uint64_t>() == points.size(), where, ": \"expected_points\" is ",
                 n.dump(), " for the ", profile, " profile but the matrix expands to ", points.size(), " point(s)");
  }
  return points;
}

}  // namespace oomlab
