// torch_twin.cpp — PyTorch twin points of the matrix (torch_twin.h).
#include "experiments/runner/torch_twin.h"

#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/io/atomic_file.h"

namespace oomlab {
using json = nlohmann::json;

namespace {
std::string python_executable() {
  if (const char* p = std::getenv("OOMLAB_PYTHON"); p && *p) return p;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');)
    if (!d.empty() && ::access((d + "/python3").c_str(), X_OK) == 0) return d + "/python3";
  return "/usr/bin/python3";
}

// The last record torch_bench.py appended to `path` that is not its versions line.
json last_record(const std::string& path) {
  std::stringstream lines(read_file(path));
  json rec;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    json j = json::parse(line);
    if (j.value("tag", "") != "_versions") rec = j;
  }
  return rec;
}

json twin_results(const json& rec, const json& options) {
  const double median_s = rec.at("median_ms").get<double>() / 1e3;
  json stats = json::object();
  for (const char* k : {"peak_allocated", "peak_reserved"})
    if (rec.contains(k))
      stats[std::string(k) == "peak_allocated" ? "allocated_bytes.all.peak" : "reserved_bytes.all.peak"] = rec[k];
  return {{"config", options},
          {"metrics", {{"step_time_s", {{"median", median_s}, {"count", rec.value("steps", 0)}}}, {"torch", rec}}},
          {"memory", {{"devices", {{"cuda:0", stats}}}, {"totals", stats}}}};
}
}  // namespace

TwinResult run_torch_twin(const std::vector<std::string>& args, const std::string& root, const std::string& device,
                          double timeout_s, const std::string& work_prefix) {
  TwinResult r;
  json options = json::object();
  for (size_t i = 0; i + 1 < args.size(); i += 2) options[args[i].substr(2)] = args[i + 1];
  if (parse_device(device).type != DeviceType::cuda) {
    r.outcome.status = "skipped";
    r.outcome.message = str_cat("a PyTorch twin measures a GPU; this run is on ", device);
    r.result = {{"config", options}};
    return r;
  }
  const std::string out = work_prefix + ".jsonl";
  std::vector<std::string> child = {root + "/scripts/torch_bench.py", options.value("tag", std::string("?")),
                                    "--out", out};
  for (const char* k : {"steps", "warmup"})
    if (options.contains(k)) child.insert(child.end(), {std::string("--") + k, options[k].get<std::string>()});
  r.outcome = run_child(python_executable(), child, timeout_s, work_prefix + ".log");
  if (r.outcome.status != "ok") return r;
  try {
    const json rec = last_record(out);
    OOMLAB_CHECK(rec.is_object() && !rec.contains("error"), "torch_bench.py: ",
                 rec.is_object() ? rec.value("error", std::string("no record")) : std::string("no record"));
    r.result = twin_results(rec, options);
  } catch (const std::exception& e) {
    r.outcome.status = "error";
    r.outcome.message = e.what();
  }
  return r;
}

}  // namespace oomlab
