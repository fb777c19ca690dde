// commands.h — the oomlab subcommands (argv after the command name -> exit code).
#pragma once
#include <set>
#include <string>
#include <vector>

namespace oomlab {
// The flags a measuring command accepts (without "--"): valued flags and switches. The
// matrix runner validates experiment specs against them. ValueError for other commands.
struct CommandFlags { std::set<std::string> valued, switches; };
const CommandFlags& command_flags(const std::string& command);   // train | summary | estimate

int cmd_train(const std::vector<std::string>& args);
int cmd_summary(const std::vector<std::string>& args);
int cmd_estimate(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_models(const std::vector<std::string>& args);
}  // namespace oomlab
