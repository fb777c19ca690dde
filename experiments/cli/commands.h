// commands.h — the oomlab subcommands (argv after the command name -> exit code).
#pragma once
#include <set>
#include <string>
#include <vector>

namespace oomlab {
class CliArgs;
struct TrainConfig;
// The flags a measuring command accepts (without "--"): valued flags and switches. The
// matrix runner validates experiment specs against them. ValueError for other commands.
struct CommandFlags { std::set<std::string> valued, switches; };
const CommandFlags& command_flags(const std::string& command);   // train | summary | estimate

// Exit codes of the oomlab executable (README "Exit codes"): 0 success; 2 usage or input
// error (bad flag or value, unknown model, corrupt or missing file, invalid experiment
// spec, unwritable output); 3 out of memory (device or host; the message names the phase);
// 4 training diverged (a NaN/Inf loss with --on-nan stop; the results are still written);
// 5 a benchmark found wrong results (allreduce-bench #wrong > 0); 70 internal error (a bug
// in oomlab: please report it).
inline constexpr int kExitUsage = 2, kExitOutOfMemory = 3, kExitDiverged = 4, kExitWrongResults = 5, kExitInternal = 70;

// Parses and validates a command's arguments (train | summary | estimate | trick |
// allreduce-bench; `run`'s are experiments/runner/run_command.h's) exactly as
// the command would, and checks its output paths, without running anything: ValueError /
// IoError on anything the command would reject. The matrix runner checks every point with
// it before the first one runs.
void check_command_args(const std::string& command, const std::vector<std::string>& args);

// The TrainConfig `oomlab train` builds from its parsed flags (no file is read).
TrainConfig train_config(const CliArgs& a);

int cmd_train(const std::vector<std::string>& args);
int cmd_summary(const std::vector<std::string>& args);
int cmd_estimate(const std::vector<std::string>& args);
int cmd_models(const std::vector<std::string>& args);
// Prints the autocast policy table (engine/autograd/autocast.h); --json FILE writes it.
int cmd_amp_policy(const std::vector<std::string>& args);
}  // namespace oomlab
