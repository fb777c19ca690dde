// run_command.h — `oomlab run experiments/NN_name [--profile quick|full] [--out FILE]
// [--fresh] [--point-timeout SECONDS]`: the command-line face of the matrix runner
// (experiment_runner.h). check_run_args validates the arguments as cmd_run would, running
// nothing (the fuzz target and the CLI tests use it).
#pragma once
#include <string>
#include <vector>

namespace oomlab {
int cmd_run(const std::vector<std::string>& args);
void check_run_args(const std::vector<std::string>& args);
}  // namespace oomlab
