// cli_test_util.h — running the built oomlab binary from a test: its exit code, the signal
// that killed it (if one did), and its stdout and stderr together.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

struct CliRun {
  int code = -1;     // the exit status; -1 when a signal ended it
  int signal = 0;    // the signal that ended oomlab (popen's shell reports it as 128 + N)
  std::string output;
};

// OOMLAB_BINARY_DIR from the environment (a test run against another build) or CMake's.
inline std::string oomlab_path() {
  const char* dir = std::getenv("OOMLAB_BINARY_DIR");
  return std::string(dir && *dir ? dir : OOMLAB_BINARY_DIR) + "/oomlab";
}

// Runs a shell command line, its stderr merged into its stdout.
inline CliRun run_shell(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  CliRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) r.output.append(buf.data(), n);
  const int status = ::pclose(p);
  if (WIFEXITED(status)) r.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  if (r.code > 128) r.signal = r.code - 128;
  return r;
}

// `env` is put before the command (e.g. "RANK=0 WORLD_SIZE=2"), `args` after it; both are
// shell words.
inline CliRun run_oomlab(const std::string& args, const std::string& env = "") {
  return run_shell(env + (env.empty() ? "" : " ") + oomlab_path() + " " + args);
}
