// run_support.cpp — the runner's helpers (run_support.h).
#include "experiments/runner/run_support.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/core/error.h"
#include "engine/core/process.h"

namespace oomlab {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::string fmt_seconds(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, int(s) % 3600 / 60);
  return buf;
}

// A point's memory in the experiment results: each device's headline stats (the standalone
// command's --json keeps all of them): bytes allocated / reserved / active / requested /
// workspace (all pools, current and peak), peak segments, retries, OOMs and capacity, the
// number of allocations made, and the bytes graph pools hold (--cuda-graphs).
json headline_memory(const json& mem) {
  if (!mem.is_object() || !mem.contains("devices")) return json::object();
  static const char* const keys[] = {
      "allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
      "reserved_bytes.all.peak",     "active_bytes.all.current",  "active_bytes.all.peak",
      "requested_bytes.all.current", "requested_bytes.all.peak",  "workspace_bytes.all.current",
      "workspace_bytes.all.peak",    "segment.all.peak",          "num_alloc_retries",
      "num_ooms",                    "capacity_bytes",            "allocation.all.allocated",
      "graph_pools_reserved_bytes"};
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

namespace {
// $TMPDIR (else /tmp), which must be a folder: a clear IoError, not a filesystem_error.
fs::path temp_root() {
  std::error_code ec;
  const fs::path t = fs::temp_directory_path(ec);
  const char* env = std::getenv("TMPDIR");
  OOMLAB_CHECK_T(IoError, !ec, "oomlab run: TMPDIR=", env ? env : "", " is not a folder (", ec.message(),
                 "): point TMPDIR at an existing folder or unset it");
  return t;
}

// oomlab_run_<pid>_* folders of runs whose process is gone (killed with -9: no destructor ran).
void remove_dead_runs_folders(const fs::path& root) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("oomlab_run_", 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(n.c_str() + 11, &end, 10);
    if (*end != '_' || !process_gone(pid)) continue;
    fs::remove_all(e.path(), ec);
  }
}

}  // namespace

// The run's scratch: $TMPDIR/oomlab_run_<pid>_XXXXXX, removed when the run ends, or by the
// next run when this one was killed.
TempDir::TempDir() {
  const fs::path root = temp_root();
  remove_dead_runs_folders(root);
  std::string p = (root / str_cat("oomlab_run_", ::getpid(), "_XXXXXX")).string();
  OOMLAB_CHECK_T(IoError, ::mkdtemp(p.data()) != nullptr, "oomlab run: cannot create a temporary directory in ",
                 root.string(), ": ", std::strerror(errno));
  path = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path, ec);
}

// The host's load averages (1, 5, 15 min) as a point starts: a timing pair measured on a
// busy shared machine shows it.
json host_load() {
  double l[3] = {0, 0, 0};
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) != 3) l[0] = l[1] = l[2] = -1;
    std::fclose(f);
  }
  return json::array({l[0], l[1], l[2]});
}

}  // namespace oomlab
