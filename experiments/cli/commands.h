// commands.h — the oomlab subcommands (argv after the command name -> exit code).
#pragma once
#include "experiments/launch/exit_codes.h"
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace oomlab {
class CliArgs;
// The flags a measuring command accepts (without "--"): valued flags and switches. The
// matrix runner validates experiment specs against them. ValueError for other commands.
struct CommandFlags { std::set<std::string> valued, switches; };
const CommandFlags& command_flags(const std::string& command);   // train | summary | estimate


// Parses and validates a command's arguments (train | summary | estimate | trick |
// allreduce-bench; `run`'s are experiments/runner/run_command.h's) exactly as
// the command would, and checks its output paths, without running anything: ValueError /
// IoError on anything the command would reject. The matrix runner checks every point with
// it before the first one runs.
void check_command_args(const std::string& command, const std::vector<std::string>& args);


// `oomlab COMMAND --help`: prints the table's rendering and returns true when asked.
bool print_help_if_asked(const std::string& command, const std::vector<std::string>& args);
// --json FILE, when given: `j` written atomically, then "wrote FILE" (not when FILE is
// standard output, where the line would follow the JSON).
void write_json_if_asked(const CliArgs& a, const nlohmann::json& j);

int cmd_train(const std::vector<std::string>& args);
// The measurements' faces (measure_commands.cpp; the work is experiments/measure's).
int cmd_trick(const std::vector<std::string>& args);
// `oomlab plan` (plan_command.cpp; the search is experiments/plan/planner.h's).
int cmd_plan(const std::vector<std::string>& args);
int cmd_step(const std::vector<std::string>& args);
int cmd_allreduce_bench(const std::vector<std::string>& args);
// Parses and checks allreduce-bench's arguments as the command would, running nothing.
void check_allreduce_bench_args(const std::vector<std::string>& args);
int cmd_summary(const std::vector<std::string>& args);
int cmd_estimate(const std::vector<std::string>& args);
int cmd_models(const std::vector<std::string>& args);
// Prints the autocast policy table (engine/autograd/autocast.h); --json FILE writes it.
int cmd_amp_policy(const std::vector<std::string>& args);
}  // namespace oomlab
