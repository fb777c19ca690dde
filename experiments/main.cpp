// main.cpp — the `oomlab` command line (the application's top: it sees the CLI commands and
// the runner): train | summary | estimate | run | models | amp-policy |
// trick | allreduce-bench | step | plan | help, and --version.
// A build with CUDA puts the CUDA backend in liboomlab_cuda.so beside this binary, loaded at
// the first CUDA use (engine/core/lazy_backend.h): cpu and meta commands start
// without mapping cuBLAS, cuDNN or NCCL.
// Contract: exit codes as commands.h (kExit*): an oomlab::Error prints "oomlab: error:
// <message>" and exits 2, out of memory (the device's or the host's std::bad_alloc) exits 3
// with the phase named, divergence 4 (cmd_train), anything unexpected "oomlab: internal
// error" and 70; output files are written atomically or not at all; a failed write to
// standard output (a full disk, > /dev/full) is an error (exit 2) after the command.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/lazy_backend.h"
#include "engine/train/version.h"
#include "experiments/cli/commands.h"
#include "experiments/cli/flag_table.h"
#include "experiments/runner/run_command.h"
#include "experiments/launch/child_process.h"

namespace {
int run_command(const std::string& cmd, const std::vector<std::string>& args);

// `oomlab help` (the command list) or `oomlab help COMMAND` (as `oomlab COMMAND --help`); any
// other word is an error, never ignored.
int help_command(const std::vector<std::string>& args) {
  if (args.empty()) { std::fputs(oomlab::main_usage().c_str(), stdout); return 0; }
  bool known = false;
  std::string names;
  for (const oomlab::CommandSpec& c : oomlab::command_table()) {
    known = known || c.name == args[0];
    names += (names.empty() ? "" : ", ") + c.name;
  }
  if (args.size() == 1 && known) return run_command(args[0], {"--help"});
  const std::string what = known ? "unexpected argument '" + args[1] + "' (oomlab help [COMMAND])"
                                 : "unknown command '" + args[0] + "' (commands: " + names + ")";
  std::fprintf(stderr, "oomlab: error: help: %s\n", what.c_str());
  return oomlab::kExitUsage;
}

int run_command(const std::string& cmd, const std::vector<std::string>& args) {
  if (cmd == "help" || cmd == "--help" || cmd == "-h") return help_command(args);
  try {
    if (cmd == "train") return oomlab::cmd_train(args);
    if (cmd == "summary") return oomlab::cmd_summary(args);
    if (cmd == "estimate") return oomlab::cmd_estimate(args);
    if (cmd == "run") return oomlab::cmd_run(args);
    if (cmd == "models") return oomlab::cmd_models(args);
    if (cmd == "amp-policy") return oomlab::cmd_amp_policy(args);
    if (cmd == "trick") return oomlab::cmd_trick(args);
    if (cmd == "allreduce-bench") return oomlab::cmd_allreduce_bench(args);
    if (cmd == "step") return oomlab::cmd_step(args);
    if (cmd == "plan") return oomlab::cmd_plan(args);
    std::fprintf(stderr, "oomlab: error: unknown command '%s'\n%s", cmd.c_str(), oomlab::main_usage().c_str());
    return 2;
  } catch (const oomlab::Interrupted& e) {
    std::fprintf(stderr, "oomlab: %s\n", e.what());
    return 128 + e.signal;
  } catch (const oomlab::OutOfMemoryError& e) {
    std::fprintf(stderr, "oomlab: error: %s\n", e.what());
    return oomlab::kExitOutOfMemory;
  } catch (const oomlab::InternalError& e) {
    std::fprintf(stderr, "oomlab: internal error: %s\n", e.what());
    return oomlab::kExitInternal;
  } catch (const oomlab::Error& e) {
    std::fprintf(stderr, "oomlab: error: %s\n", e.what());
    return oomlab::kExitUsage;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "oomlab: error: out of host memory (std::bad_alloc): the request needs more RAM than "
                         "this machine can give; try a smaller --batch, model or --synthetic-size\n");
    return oomlab::kExitOutOfMemory;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oomlab: internal error: %s\n", e.what());
    return oomlab::kExitInternal;
  }
}

// OOMLAB_LAZY_CUDA_LIBRARY (CMakeLists.txt): the CUDA backend library's file name.
void declare_lazy_backends() {
#ifdef OOMLAB_LAZY_CUDA_LIBRARY
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path dir = ec ? std::filesystem::path(".") : exe.parent_path();
  oomlab::set_lazy_backend(oomlab::DeviceType::cuda, (dir / OOMLAB_LAZY_CUDA_LIBRARY).string());
#endif
}
}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);   // progress lines appear promptly in logs
  if (argc < 2) { std::fputs(oomlab::main_usage().c_str(), stderr); return 2; }
  declare_lazy_backends();
  if (argc == 2 && std::string(argv[1]) == "--version") {
    std::fputs(oomlab::version_line().c_str(), stdout);
    return std::fflush(stdout) == 0 ? 0 : oomlab::kExitUsage;
  }
  const int rc = run_command(argv[1], std::vector<std::string>(argv + 2, argv + argc));
  // A table written to a full disk or a closed pipe (> /dev/full) is a failed command too.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "oomlab: error: cannot write to standard output: %s\n", std::strerror(errno));
    return rc != 0 ? rc : oomlab::kExitUsage;
  }
  return rc;
}
