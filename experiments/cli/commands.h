// commands.h — the oomlab subcommands (argv after the command name -> exit code).
#pragma once
#include <string>
#include <vector>

namespace oomlab {
int cmd_train(const std::vector<std::string>& args);
int cmd_summary(const std::vector<std::string>& args);
int cmd_estimate(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_models(const std::vector<std::string>& args);
}  // namespace oomlab
