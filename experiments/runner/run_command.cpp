// run_command.cpp — `oomlab run` (run_command.h).
#include "experiments/runner/run_command.h"

#include <cstdio>
#include <set>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "experiments/cli/cli_args.h"
#include "experiments/runner/experiment_runner.h"

namespace oomlab {
namespace {
const std::set<std::string> kRunFlags = {"profile", "out", "point-timeout"};

RunOptions run_options(const CliArgs& a) {
  OOMLAB_CHECK(a.positionals().size() == 1, "oomlab run: give exactly one experiment folder, e.g. "
               "oomlab run experiments/01_vgg16_memory");
  RunOptions o;
  o.profile = a.get("profile", "quick");
  OOMLAB_CHECK(o.profile == "quick" || o.profile == "full", "--profile must be quick or full (got '", o.profile, "')");
  o.out = a.get("out", "");
  if (a.has("out")) check_output_file(o.out, "--out");
  o.fresh = a.flag("fresh");
  o.point_timeout_s = a.get_double("point-timeout", 0.0);
  OOMLAB_CHECK(!a.has("point-timeout") || (o.point_timeout_s > 0 && o.point_timeout_s <= 1e9),
               "--point-timeout must be a positive number of seconds");
  return o;
}

bool wants_help(const std::vector<std::string>& args) {
  for (const auto& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}
}  // namespace

void check_run_args(const std::vector<std::string>& args) { run_options(CliArgs(args, kRunFlags, {"fresh"}, "run", 1)); }

int cmd_run(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::puts("oomlab run experiments/NN_name [--profile quick|full] [--out FILE] [--fresh] [--point-timeout SECONDS]");
    return 0;
  }
  CliArgs a(args, kRunFlags, {"fresh"}, "run", 1);
  const RunOptions o = run_options(a);
  const std::string out = run_experiment(a.positionals()[0], o);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace oomlab
