// run_command.cpp — `oomlab run` (run_command.h).
#include "experiments/runner/run_command.h"

#include <cstdio>

#include "engine/core/device.h"
#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/file_kinds.h"
#include "experiments/cli/cli_args.h"
#include "experiments/cli/flag_table.h"
#include "experiments/runner/experiment_runner.h"

namespace oomlab {
namespace {
RunOptions run_options(const CliArgs& a) {
  OOMLAB_CHECK(a.positionals().size() == 1, "oomlab run: give exactly one experiment folder, e.g. "
               "oomlab run experiments/01_vgg16_memory");
  RunOptions o;
  o.profile = a.get("profile");
  if (a.has("device")) {
    o.device = a.get("device");
    parse_device(o.device);   // a malformed name is a usage error before anything runs
  }
  o.out = a.get("out");
  if (a.has("out")) {
    check_output_file(o.out, "--out");
    for (const char* own : {"experiment.json", "summary.schema.json", "driver.cpp", "report.py", "README.md"}) {
      const std::string file = a.positionals()[0] + "/" + own;
      OOMLAB_CHECK(!same_output_file(o.out, file), "--out names ", o.out, ", the experiment's own ", own,
                   ": the results would replace it (give --out another name)");
    }
  }
  o.fresh = a.flag("fresh");
  o.point_timeout_s = a.get_double("point-timeout", 0.0);
  return o;
}
}  // namespace

void check_run_args(const std::vector<std::string>& args) { run_options(CliArgs(args, "run")); }

int cmd_run(const std::vector<std::string>& args) {
  if (help_requested(args)) {
    std::fputs(command_help("run").c_str(), stdout);
    return 0;
  }
  CliArgs a(args, "run");
  const RunOptions o = run_options(a);
  const std::string out = run_experiment(a.positionals()[0], o);
  if (!is_standard_output(out)) std::printf("wrote %s\n", out.c_str());   // never after the JSON it wrote there
  return 0;
}

}  // namespace oomlab
