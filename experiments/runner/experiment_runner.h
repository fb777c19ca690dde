// experiment_runner.h — `oomlab run experiments/NN_name`: the generic matrix runner.
// Reads experiment.json, validates it (matrix.h; the driver's extra keys), expands the
// matrix for the profile and runs every point as a child process of the oomlab executable
// with a timeout (child_process.h): fresh allocators per point, and a crash, abort, OOM or
// timeout is that point's outcome. Progress (point i/N, elapsed, ETA) goes to stdout, with a
// training point's own step and epoch lines as they come.
// After each point the results so far go atomically to OUT.partial; a later run of the
// same spec and profile resumes from it, skipping the points that finished ok or oom
// (deterministic outcomes; errors, crashes and timeouts are run again) unless `fresh`.
// The run holds OUT.lock (file_lock.h) from before it reads OUT.partial to its end: a second
// run on the same OUT is an IoError (exit 2) before any point, never interleaved points.
// A run on cuda (--device cuda[:N], or the gpu profile's default) first checks that a GPU is
// there: without one it is one DeviceError (exit 2) and nothing is written. A run given a
// device or the gpu profile writes reports/results/local/PROFILE-DEVICE/NAME.json by
// default, never over the committed results.
// At the end the experiment's driver (registry.h) computes the summary and verdict and
// the results (schema in README.md) are written atomically to OUT, and OUT.partial removed.
// A point keeps the child's config and metrics whole and its memory's headline stats per
// device (headline_memory in the .cpp; the child's own --json has them all).
// The gpu profile is summarised and judged by the spec's gpu_claims (gpu_claims.h).
// If the driver cannot summarise (a point it needs failed), the partial file stays and a
// ValueError names the failed points; no results file is written.
#pragma once
#include <string>

namespace oomlab {

struct RunOptions {
  std::string profile = "quick";   // quick | full | gpu (matrix.h)
  std::string device;              // "": the spec's (cuda for gpu); else every point's (matrix.h)
  std::string out;                 // "": reports/results/<name>.json beside experiments/
  std::string executable;          // the oomlab binary the points run; "": this process's
  bool fresh = false;              // ignore OUT.partial
  double point_timeout_s = 0;      // > 0 overrides the spec's timeout_s
  bool quiet = false;              // no progress lines
};

// Returns the path written.
std::string run_experiment(const std::string& dir, const RunOptions& options);

}  // namespace oomlab
