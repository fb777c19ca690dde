// cli_output.h — where a command's text and results go. The CLI prints its tables and notes on
// standard output and writes --json FILE; the Python package (experiments/python) runs the
// same commands under a CommandCapture, which keeps the results JSON and drops the text.
// Contracts: a capture covers the commands run on its thread while it lives (nested captures:
// the innermost); cli_printf is printf onto standard output, or nothing under a capture;
// progress (plan's lines on standard error) goes through cli_progress, dropped alike.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace oomlab {

class CommandCapture {
 public:
  CommandCapture();
  ~CommandCapture();
  CommandCapture(const CommandCapture&) = delete;
  CommandCapture& operator=(const CommandCapture&) = delete;
  nlohmann::json results;   // what --json would have written (null: the command wrote none)

 private:
  CommandCapture* outer_;
};

CommandCapture* active_capture();   // this thread's innermost, or nullptr
void cli_printf(const char* format, ...) __attribute__((format(printf, 1, 2)));
void cli_progress(const std::string& line);   // "plan: <line>" on standard error

}  // namespace oomlab
