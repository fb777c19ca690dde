// cli_output.cpp — the CLI's text sink and the Python package's capture (cli_output.h).
#include "experiments/cli/cli_output.h"

#include <cstdarg>
#include <cstdio>

namespace oomlab {
namespace {
thread_local CommandCapture* current = nullptr;
}  // namespace

CommandCapture::CommandCapture() : outer_(current) { current = this; }

CommandCapture::~CommandCapture() { current = outer_; }

CommandCapture* active_capture() { return current; }

void cli_printf(const char* format, ...) {
  if (current) return;
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
}

void cli_progress(const std::string& line) {
  if (!current) std::fprintf(stderr, "plan: %s\n", line.c_str());
}

}  // namespace oomlab
