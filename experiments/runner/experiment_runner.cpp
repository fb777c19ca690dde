// experiment_runner.cpp — the generic matrix runner behind `oomlab run` (experiment_runner.h).
#include "experiments/runner/experiment_runner.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/core/process.h"
#include "engine/io/atomic_file.h"
#include "engine/io/file_lock.h"
#include "engine/train/results.h"
#include "experiments/cli/commands.h"
#include "experiments/launch/child_process.h"
#include "experiments/runner/gpu_claims.h"
#include "experiments/runner/matrix.h"
#include "experiments/runner/registry.h"
#include "experiments/runner/run_support.h"
#include "experiments/runner/torch_twin.h"

namespace oomlab {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr double kDefaultPointTimeoutS = 1800;

json load_spec(const fs::path& spec_path) {
  std::error_code ec;   // an unusable path (too long, ...) is "not found", never a filesystem_error
  OOMLAB_CHECK_T(IoError, fs::is_regular_file(spec_path, ec), "oomlab run: ", spec_path.string(),
                 " not found (give an ", "experiment folder such as experiments/01_vgg16_memory)");
  return parse_experiment_spec(read_file(spec_path.string()), spec_path.string());
}

// Identifies the spec + profile a partial file belongs to.
std::string spec_digest(const json& spec, const std::string& profile) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016zx", std::hash<std::string>{}(spec.dump() + "|" + profile));
  return buf;
}

// The build and machine that ran a partial file's points: a results file's points all come
// from one commit, tree state and machine (docs/VERDICTS.md), so a partial file
// made by another is run again, never resumed. On a GPU the machine is its GPU model and the
// run's device: a later lease (another host, the same kind of GPU) resumes the record.
json this_build(const Device& device) {
  const json c = results_context(cpu_device());
  json b = {{"git_sha", c.value("git_sha", "")}, {"git_dirty", c.value("git_dirty", true)}, {"device", device.str()}};
  if (device.type != DeviceType::cuda) {
    b["host"] = c.value("host", "");
    b["cpu"] = c.value("cpu", "");
    return b;
  }
  if (const BackendHooks h = backend_hooks(DeviceType::cuda); h.physical) b["gpu"] = h.physical(device.index);
  return b;
}

// The points of a partial file that can be kept: same digest and build, same arguments,
// outcome ok/oom/diverged.
std::map<std::string, json> resumable_points(const fs::path& partial, const std::string& digest, const json& build) {
  std::map<std::string, json> out;
  std::error_code ec;
  if (!fs::exists(partial, ec)) return out;
  try {
    const json j = json::parse(read_file(partial.string()));
    if (j.value("spec_digest", "") != digest) return out;
    if (j.value("build", json()) != build) {
      std::printf("oomlab run: not resuming %s: its points come from another build or machine (%s; this is %s)\n",
                  partial.c_str(), j.value("build", json()).dump().c_str(), build.dump().c_str());
      return out;
    }
    for (const json& p : j.at("points")) {
      const std::string st = p.at("outcome").value("status", "");
      if (st == "ok" || st == "oom" || st == "diverged" || st == "skipped") out[p.at("name").get<std::string>()] = p;
    }
  } catch (const std::exception& e) {   // a damaged partial file is ignored, not trusted
    std::printf("oomlab run: ignoring %s (%s)\n", partial.c_str(), e.what());
    out.clear();
  }
  return out;
}

}  // namespace

namespace {
// What a run needs before its first point: the spec and its driver, every point's
// arguments checked as its command would, the timeout, the output paths (checked), the
// points of a partial file that can be resumed, the executable.
struct Plan {
  json spec;
  std::string name;
  const ExperimentDriver* driver = nullptr;
  std::vector<PointSpec> specs;
  double timeout_s = 0;
  Device device;
  std::string device_text;   // the run's device as given ("cuda", "meta", "cuda:1")
  fs::path out, partial, root;   // root: the repository ({root} in a spec)
  std::string digest, exe;
  json build;
  std::map<std::string, json> done;
  std::shared_ptr<ExclusiveFileLock> lock;   // on out + ".lock": one run per results file
};

// `arg` with every `key` ("{scratch}", "{root}") replaced by `dir`.
std::string with_placeholder(std::string arg, const std::string& key, const fs::path& dir) {
  for (size_t at = arg.find(key); at != std::string::npos; at = arg.find(key, at))
    arg.replace(at, key.size(), dir.string());
  return arg;
}
std::string with_scratch(std::string arg, const fs::path& dir) {
  return with_placeholder(std::move(arg), "{scratch}", dir);
}
// The repository an experiment folder sits in (experiments/NN_name/experiment.json -> ../..).
fs::path root_of(const fs::path& spec_path) { return spec_path.parent_path().parent_path().parent_path(); }

void check_points(const std::vector<PointSpec>& specs, const fs::path& spec_path, const Device& device) {
  for (const PointSpec& ps : specs) {
    if (ps.command == "torch") continue;   // torch_bench.py checks its own (a GPU machine's PyTorch)
    if (ps.gpu_only && device.type != DeviceType::cuda) continue;   // skipped there
    std::vector<std::string> args = ps.args();
    args.erase(args.begin());
    // {scratch} exists only once the run starts, and a checkpoint there only once an earlier
    // point wrote it: the check sees the experiment's folder in its place.
    for (std::string& a : args) a = with_placeholder(a, "{root}", root_of(spec_path));
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].find("{scratch}") != std::string::npos)
        args[i] = i > 0 && args[i - 1] == "--resume" ? spec_path.parent_path().string()
                                                     : with_scratch(args[i], spec_path.parent_path());
    try {
      check_command_args(ps.command, args);
    } catch (const Error& e) {
      throw ValueError(str_cat(spec_path.string(), ": point '", ps.name, "': ", e.what()));
    }
  }
}

// The output locations are checked before the first point (not after hours of points).
void prepare_outputs(const Plan& p) {
  check_output_dir(p.out.parent_path().string(), "oomlab run: results folder");
  std::error_code ec;
  fs::create_directories(p.out.parent_path(), ec);
  OOMLAB_CHECK_T(IoError, !ec, "oomlab run: cannot create ", p.out.parent_path().string(), ": ", ec.message());
  check_output_file(p.out.string(), "oomlab run: results file");
  check_output_file(p.partial.string(), "oomlab run: partial results file");
}

// A run on a GPU needs one before any point starts (and before anything is written): one
// DeviceError line naming what is missing.
void check_device_usable(const Device& device, const std::string& text) {
  if (device.type != DeviceType::cuda) return;
  const BackendHooks hooks = backend_hooks(DeviceType::cuda);
  OOMLAB_CHECK_T(DeviceError, hooks.physical != nullptr, "oomlab run --device ", text,
                 ": this oomlab was built without CUDA (no nvcc at build time); run on cpu or meta, or build on a "
                 "machine with the CUDA toolkit");
  try {
    hooks.physical(device.index);
  } catch (const Error& e) {
    throw DeviceError(str_cat("oomlab run --device ", text, ": no GPU here: ", e.what()));
  }
}

// reports/results/NAME.json for the spec's own profile and device (the committed results);
// a run on another device or the gpu profile writes beside them, never over them:
// reports/results/local/PROFILE-DEVICE/NAME.json (git ignores local/).
fs::path default_out(const fs::path& dir, const std::string& name, const RunOptions& o, const Device& device) {
  const fs::path results = dir.parent_path().parent_path() / "reports" / "results";
  if (o.device.empty() && o.profile != "gpu") return results / (name + ".json");
  std::string d = device.str();
  std::replace(d.begin(), d.end(), ':', '-');
  return results / "local" / (o.profile + "-" + d) / (name + ".json");
}

Plan plan_run(const std::string& dir, const RunOptions& o) {
  const auto& profiles = profile_names();
  OOMLAB_CHECK(std::find(profiles.begin(), profiles.end(), o.profile) != profiles.end(),
               "--profile must be quick, full or gpu (got '", o.profile, "')");
  if (!o.device.empty()) check_device_usable(parse_device(o.device), o.device);
  fs::path d = fs::absolute(fs::path(dir)).lexically_normal();
  if (d.filename().empty()) d = d.parent_path();
  const fs::path spec_path = d / "experiment.json";
  Plan p;
  p.spec = load_spec(spec_path);
  p.name = p.spec["name"];
  // The folder names the experiment: a copied folder must not run another one's driver and
  // overwrite its results.
  OOMLAB_CHECK(p.name == d.filename().string(), spec_path.string(), ": \"name\" is '", p.name, "' but the folder is '",
               d.filename().string(), "': an experiment's name is its folder's (rename one of them)");
  p.driver = &experiment_driver(p.name);
  p.device_text = run_device(p.spec, o.profile, o.device);
  p.device = parse_device(p.device_text);
  if (o.device.empty()) check_device_usable(p.device, p.device_text);   // the gpu profile's cuda (a given one: above)
  p.specs = expand_matrix(p.spec, o.profile, p.driver->spec_keys, spec_path.string(), o.device);
  for (const SpecField& f : p.driver->spec_fields) spec_field(p.spec, f, spec_path.string());
  if (o.profile == "gpu") check_gpu_claims(p.spec, p.specs, spec_path.string());
  check_points(p.specs, spec_path, p.device);
  p.timeout_s = o.point_timeout_s;
  if (p.timeout_s <= 0 && p.spec.contains("timeout_s"))   // validated by parse_experiment_spec
    p.timeout_s = for_profile(p.spec["timeout_s"], o.profile, spec_path.string() + ": timeout_s").get<double>();
  if (p.timeout_s <= 0) p.timeout_s = kDefaultPointTimeoutS;
  p.root = root_of(spec_path);
  p.out = o.out.empty() ? default_out(d, p.name, o, p.device) : fs::absolute(fs::path(o.out));
  p.partial = p.out.string() + ".partial";
  prepare_outputs(p);
  p.lock = std::make_shared<ExclusiveFileLock>(p.out.string() + ".lock", str_cat("oomlab run: ", p.out.string()));
  p.digest = spec_digest(p.spec, o.profile + "|" + p.device_text);
  p.build = this_build(p.device);
  if (!o.fresh) p.done = resumable_points(p.partial, p.digest, p.build);
  p.exe = o.executable.empty() ? self_executable() : o.executable;
  OOMLAB_CHECK_T(IoError, access(p.exe.c_str(), X_OK) == 0, "oomlab run: cannot execute ", p.exe);
  return p;
}

// A PyTorch twin point (torch_twin.h), recorded as run_point records oomlab's.
json run_twin_point(const Plan& p, size_t i, const PointSpec& ps, const fs::path& tmp) {
  std::vector<std::string> args = ps.args();
  args.erase(args.begin());
  const json load = host_load();
  const TwinResult r = run_torch_twin(args, p.root.string(), p.device_text, p.timeout_s,
                                      (tmp / str_cat("point-", i)).string());
  return {{"name", ps.name}, {"block", ps.block}, {"command", ps.command}, {"args", ps.args()}, {"axes", ps.axes},
          {"options", ps.options}, {"outcome", outcome_json(r.outcome)}, {"host_load", load},
          {"dropped_flags", ps.dropped},
          {"config", r.result.value("config", ps.options)}, {"metrics", r.result.value("metrics", json::object())},
          {"memory", r.result.value("memory", json::object())}};
}

// Runs point i in a child process; its record for the results (outcome, config, metrics,
// headline memory, the host's load as it started).
json run_point(const Plan& p, size_t i, const PointSpec& ps, const fs::path& tmp, bool quiet) {
  if (ps.command == "torch") return run_twin_point(p, i, ps, tmp);
  if (ps.gpu_only && p.device.type != DeviceType::cuda) {   // e.g. NCCL, on a dry run of the gpu profile
    ChildOutcome skipped{"skipped", -1, 0, 0, str_cat("a GPU-only point; this run is on ", p.device_text)};
    return {{"name", ps.name}, {"block", ps.block}, {"command", ps.command}, {"args", ps.args()}, {"axes", ps.axes},
            {"options", ps.options}, {"outcome", outcome_json(skipped)}, {"host_load", host_load()},
            {"dropped_flags", ps.dropped}, {"config", ps.options}, {"metrics", json::object()},
            {"memory", json::object()}};
  }
  const std::vector<std::string> args = ps.args();
  const size_t n = p.specs.size();
  const std::string json_path = (tmp / str_cat("point-", i, ".json")).string();
  const std::string log_path = (tmp / str_cat("point-", i, ".log")).string();
  std::vector<std::string> child_args = args;
  for (std::string& a : child_args)
    a = with_placeholder(with_scratch(a, tmp / "scratch"), "{root}", p.root);  // matrix.h
  fs::create_directories(tmp / "scratch");
  child_args.insert(child_args.end(), {"--json", json_path});
  // A training point's own progress lines (steps, epochs) are shown as they come;
  // summary/estimate print tables, which the results hold anyway.
  const bool follow = !quiet && ps.command == "train";
  if (follow) std::printf("[%zu/%zu] %s ...\n", i + 1, n, ps.name.c_str());
  const json load = host_load();
  ChildOutcome oc;
  try {
    oc = run_child(p.exe, child_args, p.timeout_s, log_path, [&](const std::string& line) {
      if (follow) std::printf("    | %s\n", line.c_str());
    });
  } catch (const Interrupted& e) {
    throw Interrupted(e.signal, str_cat("oomlab run ", p.name, ": ", e.what(), " at point ", i + 1, "/", n, "; the ", i,
                                        " point(s) before it are in ", p.partial.string(),
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
  return {{"name", ps.name}, {"block", ps.block}, {"command", ps.command}, {"args", args}, {"axes", ps.axes},
          {"options", ps.options}, {"outcome", outcome_json(oc)}, {"host_load", load},
          {"dropped_flags", ps.dropped},
          {"config", result.value("config", ps.options)}, {"metrics", result.value("metrics", json::object())},
          {"memory", headline_memory(result.value("memory", json::object()))}};
}

void print_progress(size_t i, size_t n, const std::string& name, const json& point, bool resumed, double elapsed,
                    double eta, bool eta_known) {
  const std::string status = point["outcome"]["status"];
  std::string what =
      resumed ? "resumed (" + status + ")" : status + " in " + fmt_seconds(point["outcome"].value("seconds", 0.0));
  if (status != "ok" && point["outcome"].value("message", "") != "")
    what += ": " + point["outcome"]["message"].get<std::string>();
  std::printf("[%zu/%zu] %s: %s | elapsed %s, ETA %s\n", i + 1, n, name.c_str(), what.c_str(),
              fmt_seconds(elapsed).c_str(), eta_known ? fmt_seconds(eta).c_str() : "?");
}

// The driver's summary and verdict, then the results file (the partial one removed).
std::string finish_run(const Plan& p, const RunOptions& o, json& points, const json& runner) {
  json driver_spec = p.spec;
  driver_spec["profile"] = o.profile;
  driver_spec["device"] = p.device_text;
  json summary, verdict;
  try {
    if (o.profile == "gpu") {   // judged by the spec's gpu_claims (gpu_claims.h), not the driver
      summary = gpu_claims_summary(p.spec, points, p.device_text);
      verdict = gpu_claims_verdict(summary);
    } else {
      summary = p.driver->summarize(driver_spec, points);
      verdict = p.driver->verdict(driver_spec, summary);
    }
  } catch (const std::exception& e) {   // oomlab::Error, or a JSON-library error on data the driver did not expect
    throw ValueError(str_cat("oomlab run ", p.name, ": cannot summarise the points (", e.what(),
                             "); the points so far are in ", p.partial.string()));
  }
  json config = p.spec;
  config.erase("source");
  config.erase("expected_points");   // the folder's check on its matrix, not the run's configuration
  config["profile"] = o.profile;
  config["device"] = p.device_text;
  json results = {{"schema_version", kResultsSchemaVersion}, {"experiment", p.name},
                  {"title", p.spec.value("title", "")}, {"claim", p.spec.value("claim", "")},
                  {"context", results_context(p.device)}, {"config", config},
                  {"source", p.spec.value("source", json::object())}, {"points", points},
                  {"summary", summary}, {"verdict", verdict}, {"runner", runner}};
  write_json_atomic(p.out.string(), results);
  std::error_code ec;
  fs::remove(p.partial, ec);
  return p.out.string();
}
}  // namespace

std::string run_experiment(const std::string& dir, const RunOptions& o) {
  const Plan p = plan_run(dir, o);
  const size_t n = p.specs.size();
  if (!o.quiet)
    std::printf("oomlab run %s (%s profile): %zu point(s), timeout %s each%s\n", p.name.c_str(), o.profile.c_str(), n,
                fmt_seconds(p.timeout_s).c_str(),
                p.done.empty() ? "" : str_cat(", resuming from ", p.partial.string()).c_str());
  InterruptGuard interrupts;   // Ctrl-C / kill stop the running point and unwind (temp dir removed)
  TempDir tmp;
  json points = json::array();
  std::map<std::string, int> counts;
  int resumed = 0, ran = 0;
  double ran_seconds = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < n; ++i) {
    const PointSpec& ps = p.specs[i];
    auto it = p.done.find(ps.name);
    const bool was_resumed = it != p.done.end() && it->second.value("args", json::array()) == json(ps.args());
    json point = was_resumed ? it->second : run_point(p, i, ps, tmp.path, o.quiet);
    if (was_resumed) {
      ++resumed;
    } else {
      ++ran;
      ran_seconds += point["outcome"].value("seconds", 0.0);
    }
    counts[point["outcome"]["status"].get<std::string>()] += 1;
    points.push_back(point);
    write_json_atomic(p.partial.string(), json{{"spec_digest", p.digest}, {"build", p.build},
                                               {"experiment", p.name}, {"profile", o.profile}, {"points", points}});
    if (!o.quiet) {
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      print_progress(i, n, ps.name, point, was_resumed, elapsed, ran > 0 ? ran_seconds / ran * double(n - i - 1) : 0,
                     ran > 0);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const json runner = {{"points", n}, {"ran", ran}, {"resumed", resumed}, {"seconds", seconds},
                       {"point_timeout_s", p.timeout_s}, {"outcomes", counts}};
  return finish_run(p, o, points, runner);
}

}  // namespace oomlab
