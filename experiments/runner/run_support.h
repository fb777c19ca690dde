// run_support.h — what the matrix runner (experiment_runner.cpp) needs beside its plan:
// progress times, a point's headline memory and outcome in the results' shape, the host's
// load as a point starts, and the run's scratch folder.
// Contracts: TempDir is $TMPDIR/oomlab_run_<pid>_XXXXXX (an IoError naming TMPDIR when it is
// not a folder), removed with the object, or by the next run when this one was killed -9
// (folders of processes that are gone); host_load() is [1, 5, 15]-minute load averages
// (-1 each when /proc/loadavg cannot be read).
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "experiments/launch/child_process.h"

namespace oomlab {

std::string fmt_seconds(double s);                            // "12.3 s", "4m05s", "1h02m"
nlohmann::json headline_memory(const nlohmann::json& mem);    // each device's headline stats
nlohmann::json outcome_json(const ChildOutcome& o);           // {status, seconds, message[, exit_code, signal]}
nlohmann::json host_load();

struct TempDir {
  std::filesystem::path path;
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace oomlab
