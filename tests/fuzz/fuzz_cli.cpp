// fuzz_cli.cpp — libFuzzer target for the command-line checks of the oomlab subcommands
// (experiments/cli/commands.h): check_command_args(command, args), which parses and
// validates a command's arguments as the command would, without running anything or
// writing any file.
// Input: words separated by NUL or newline (a final separator is ignored). The first word
// picks the command: train, summary, estimate, run, trick or allreduce-bench when it is one of
// them, otherwise the one its first byte selects (byte % 6); the other words are the arguments.
// Expected rejections: oomlab::Error (ValueError / IoError / ShapeError naming the flag).
// Findings: any other exception (std::invalid_argument / out_of_range from a number parse,
// a nlohmann error, ...), a sanitizer report, a hang or an out-of-memory.
// Seeds: tests/fuzz/corpus/fuzz_cli/ (command lines from README.md and the experiment specs);
// dictionary: tests/fuzz/fuzz_cli.dict. Run from the repository root (relative paths such
// as experiments/02_memory_vs_batch then exist).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "experiments/cli/commands.h"
#include "experiments/runner/run_command.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* const kCommands[] = {"train", "summary", "estimate", "run", "trick", "allreduce-bench"};
  constexpr size_t kCount = sizeof kCommands / sizeof kCommands[0];
  std::vector<std::string> words(1);
  for (size_t i = 0; i < size; ++i) {
    const char c = char(data[i]);
    if (c == '\0' || c == '\n') words.emplace_back();
    else words.back().push_back(c);
  }
  if (words.size() > 1 && words.back().empty()) words.pop_back();   // a final separator ends the last word
  std::string command = words.front();
  bool known = false;
  for (const char* c : kCommands) known |= command == c;
  if (!known) command = kCommands[(command.empty() ? 0 : uint8_t(command[0])) % kCount];
  const std::vector<std::string> args(words.begin() + 1, words.end());
  try {
    if (command == "run") oomlab::check_run_args(args);
    else oomlab::check_command_args(command, args);
  } catch (const oomlab::Error&) {
  }
  return 0;
}
