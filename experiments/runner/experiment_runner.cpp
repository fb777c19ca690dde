// experiment_runner.cpp — the generic matrix runner behind `oomlab run` (experiment_runner.h).
#include "experiments/runner/experiment_runner.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/train/results.h"
#include "experiments/cli/commands.h"
#include "experiments/runner/child_process.h"
#include "experiments/runner/matrix.h"
#include "experiments/runner/registry.h"

namespace oomlab {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr double kDefaultPointTimeoutS = 1800;

json load_spec(const fs::path& spec_path) {
  std::error_code ec;   // an unusable path (too long, ...) is "not found", never a filesystem_error
  OOMLAB_CHECK_T(IoError, fs::is_regular_file(spec_path, ec), "oomlab run: ", spec_path.string(), " not found (give an ",
                 "experiment folder such as experiments/01_vgg16_memory)");
  return parse_experiment_spec(read_file(spec_path.string()), spec_path.string());
}

// Identifies the spec + profile a partial file belongs to.
std::string spec_digest(const json& spec, const std::string& profile) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016zx", std::hash<std::string>{}(spec.dump() + "|" + profile));
  return buf;
}

// The points of a partial file that can be kept: same digest, same arguments, outcome ok/oom.
std::map<std::string, json> resumable_points(const fs::path& partial, const std::string& digest) {
  std::map<std::string, json> out;
  std::error_code ec;
  if (!fs::exists(partial, ec)) return out;
  try {
    const json j = json::parse(read_file(partial.string()));
    if (j.value("spec_digest", "") != digest) return out;
    for (const json& p : j.at("points")) {
      const std::string st = p.at("outcome").value("status", "");
      if (st == "ok" || st == "oom" || st == "diverged") out[p.at("name").get<std::string>()] = p;
    }
  } catch (const std::exception& e) {   // a damaged partial file is ignored, not trusted
    std::printf("oomlab run: ignoring %s (%s)\n", partial.c_str(), e.what());
    out.clear();
  }
  return out;
}

std::string fmt_seconds(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, int(s) % 3600 / 60);
  return buf;
}

// A point's memory in the experiment results: each device's headline stats (the standalone
// command's --json keeps all of them): bytes allocated / reserved / active / requested /
// workspace (all pools, current and peak), peak segments, retries, OOMs and capacity.
json headline_memory(const json& mem) {
  if (!mem.is_object() || !mem.contains("devices")) return json::object();
  static const char* const keys[] = {
      "allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
      "reserved_bytes.all.peak",     "active_bytes.all.current",  "active_bytes.all.peak",
      "requested_bytes.all.current", "requested_bytes.all.peak",  "workspace_bytes.all.current",
      "workspace_bytes.all.peak",    "segment.all.peak",          "num_alloc_retries",
      "num_ooms",                    "capacity_bytes"};
  auto pick = [](const json& stats) {
    json out = json::object();
    for (const char* k : keys)
      if (stats.contains(k)) out[k] = stats[k];
    return out;
  };
  json devices = json::object();
  for (auto it = mem["devices"].begin(); it != mem["devices"].end(); ++it) devices[it.key()] = pick(it.value());
  return {{"devices", devices}, {"totals", pick(mem.value("totals", json::object()))}};
}

json outcome_json(const ChildOutcome& o) {
  json j = {{"status", o.status}, {"seconds", o.seconds}, {"message", o.message}};
  if (o.exit_code >= 0) j["exit_code"] = o.exit_code;
  if (o.signal) j["signal"] = o.signal;
  return j;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string p = (fs::temp_directory_path() / "oomlab_run_XXXXXX").string();
    OOMLAB_CHECK_T(IoError, ::mkdtemp(p.data()) != nullptr, "oomlab run: cannot create a temporary directory");
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};
}  // namespace

std::string run_experiment(const std::string& dir, const RunOptions& o) {
  OOMLAB_CHECK(o.profile == "quick" || o.profile == "full", "--profile must be quick or full (got '", o.profile, "')");
  fs::path d = fs::absolute(fs::path(dir)).lexically_normal();
  if (d.filename().empty()) d = d.parent_path();
  const fs::path spec_path = d / "experiment.json";
  const json spec = load_spec(spec_path);
  const std::string name = spec["name"];
  const ExperimentDriver& driver = experiment_driver(name);
  const std::vector<PointSpec> specs = expand_matrix(spec, o.profile, driver.spec_keys, spec_path.string());
  for (const SpecField& f : driver.spec_fields) spec_field(spec, f, spec_path.string());
  // Every point's arguments are checked as its command would, before the first one runs.
  for (const PointSpec& ps : specs) {
    std::vector<std::string> args = ps.args();
    args.erase(args.begin());
    try {
      check_command_args(ps.command, args);
    } catch (const Error& e) {
      throw ValueError(str_cat(spec_path.string(), ": point '", ps.name, "': ", e.what()));
    }
  }
  double timeout_s = o.point_timeout_s;
  if (timeout_s <= 0 && spec.contains("timeout_s"))   // validated by parse_experiment_spec
    timeout_s = for_profile(spec["timeout_s"], o.profile, spec_path.string() + ": timeout_s").get<double>();
  if (timeout_s <= 0) timeout_s = kDefaultPointTimeoutS;
  const Device device = parse_device(spec.value("device", std::string("cpu")));
  const fs::path out = o.out.empty() ? d.parent_path().parent_path() / "reports" / "results" / (name + ".json")
                                     : fs::absolute(fs::path(o.out));
  const fs::path partial = out.string() + ".partial";
  // The output locations are checked before the first point (not after hours of points).
  check_output_dir(out.parent_path().string(), "oomlab run: results folder");
  std::error_code ec;
  fs::create_directories(out.parent_path(), ec);
  OOMLAB_CHECK_T(IoError, !ec, "oomlab run: cannot create ", out.parent_path().string(), ": ", ec.message());
  check_output_file(out.string(), "oomlab run: results file");
  check_output_file(partial.string(), "oomlab run: partial results file");
  const std::string digest = spec_digest(spec, o.profile);
  std::map<std::string, json> done = o.fresh ? std::map<std::string, json>{} : resumable_points(partial, digest);
  const std::string exe = o.executable.empty() ? self_executable() : o.executable;
  OOMLAB_CHECK_T(IoError, access(exe.c_str(), X_OK) == 0, "oomlab run: cannot execute ", exe);

  const size_t n = specs.size();
  if (!o.quiet)
    std::printf("oomlab run %s (%s profile): %zu point(s), timeout %s each%s\n", name.c_str(), o.profile.c_str(), n,
                fmt_seconds(timeout_s).c_str(),
                done.empty() ? "" : str_cat(", resuming from ", partial.string()).c_str());
  InterruptGuard interrupts;   // Ctrl-C / kill stop the running point and unwind (temp dir removed)
  TempDir tmp;
  json points = json::array();
  std::map<std::string, int> counts;
  int resumed = 0, ran = 0;
  double ran_seconds = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) {
    const PointSpec& ps = specs[i];
    std::vector<std::string> args = ps.args();
    json point;
    auto it = done.find(ps.name);
    const bool was_resumed = it != done.end() && it->second.value("args", json::array()) == json(args);
    if (was_resumed) {
      point = it->second;
      ++resumed;
    } else {
      const std::string json_path = (tmp.path / str_cat("point-", i, ".json")).string();
      const std::string log_path = (tmp.path / str_cat("point-", i, ".log")).string();
      std::vector<std::string> child_args = args;
      child_args.insert(child_args.end(), {"--json", json_path});
      // A training point's own progress lines (steps, epochs) are shown as they come;
      // summary/estimate print tables, which the results hold anyway.
      const bool follow = !o.quiet && ps.command == "train";
      if (follow) std::printf("[%zu/%zu] %s ...\n", i + 1, n, ps.name.c_str());
      ChildOutcome oc;
      try {
        oc = run_child(exe, child_args, timeout_s, log_path, [&](const std::string& line) {
          if (follow) std::printf("    | %s\n", line.c_str());
        });
      } catch (const Interrupted& e) {
        throw Interrupted(e.signal, str_cat("oomlab run ", name, ": ", e.what(), " at point ", i + 1, "/", n,
                                            "; the ", i, " point(s) before it are in ", partial.string(),
                                            " and a rerun resumes from there"));
      }
      json result = json::object();
      if (oc.status == "ok" || oc.status == "diverged") {
        try {
          result = json::parse(read_file(json_path));
        } catch (const std::exception& e) {
          oc.status = "error";
          oc.message = str_cat("the point exited 0 but its results could not be read: ", e.what());
        }
      }
      point = {{"name", ps.name}, {"command", ps.command}, {"args", args}, {"axes", ps.axes},
               {"options", ps.options}, {"outcome", outcome_json(oc)},
               {"config", result.value("config", ps.options)}, {"metrics", result.value("metrics", json::object())},
               {"memory", headline_memory(result.value("memory", json::object()))}};
      ++ran;
      ran_seconds += oc.seconds;
    }
    const std::string status = point["outcome"]["status"];
    counts[status] += 1;
    points.push_back(point);
    write_json_atomic(partial.string(), json{{"spec_digest", digest}, {"experiment", name}, {"profile", o.profile},
                                             {"points", points}});
    if (!o.quiet) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double eta = ran > 0 ? ran_seconds / ran * double(n - i - 1) : 0;
      std::string what = was_resumed ? "resumed (" + status + ")"
                                     : status + " in " + fmt_seconds(point["outcome"].value("seconds", 0.0));
      if (status != "ok" && point["outcome"].value("message", "") != "")
        what += ": " + point["outcome"]["message"].get<std::string>();
      std::printf("[%zu/%zu] %s: %s | elapsed %s, ETA %s\n", i + 1, n, ps.name.c_str(), what.c_str(),
                  fmt_seconds(elapsed).c_str(), ran > 0 ? fmt_seconds(eta).c_str() : "?");
    }
  }

  json driver_spec = spec;
  driver_spec["profile"] = o.profile;
  json summary, verdict;
  try {
    summary = driver.summarize(driver_spec, points);
    verdict = driver.verdict(driver_spec, summary);
  } catch (const std::exception& e) {   // oomlab::Error, or a JSON-library error on data the driver did not expect
    throw ValueError(str_cat("oomlab run ", name, ": cannot summarise the points (", e.what(),
                             "); the points so far are in ", partial.string()));
  }
  json config = spec;
  config.erase("source");
  config["profile"] = o.profile;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json runner = {{"points", n}, {"ran", ran}, {"resumed", resumed}, {"seconds", seconds},
                 {"point_timeout_s", timeout_s}, {"outcomes", counts}};
  json results = {{"schema_version", kResultsSchemaVersion}, {"experiment", name},
                  {"title", spec.value("title", "")}, {"claim", spec.value("claim", "")},
                  {"context", results_context(device)}, {"config", config},
                  {"source", spec.value("source", json::object())}, {"points", points},
                  {"summary", summary}, {"verdict", verdict}, {"runner", runner}};
  write_json_atomic(out.string(), results);
  fs::remove(partial, ec);
  return out.string();
}

}  // namespace oomlab
