// child_process.h — runs one matrix point as a child process (the oomlab executable) with
// a timeout, so that each point starts with fresh allocators and a crash, an abort or an
// out-of-memory of one point is that point's outcome, not the run's.
// Contracts:
//  * The child's stdout and stderr go to log_path; run_child never throws for anything the
//    child does (only for failing to start it: IoError).
//  * status: "ok" (exit 0), "oom" (exit 3, exit_codes.h), "diverged" (exit 4: a NaN/Inf loss;
//    its results file is written), "error" (other non-zero exit), "crash" (killed by a signal it did not get from us),
//    "timeout" (still running after timeout_s: SIGTERM, then SIGKILL 5 s later).
//  * message: the child's "oomlab: error: ..." line, the signal, or the timeout.
//  * The child gets SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG): a run
//    killed with -9 leaves no point running. Call run_child from a thread that outlives it.
//  * Interrupts: while an InterruptGuard lives, SIGINT / SIGTERM / SIGHUP only set a flag;
//    run_child then stops its child (SIGTERM, SIGKILL 5 s later) and throws Interrupted, so
//    the caller unwinds (temp files removed, partial results kept) instead of dying with a
//    child left running. A child that did not finish while the flag is set (a signal to the
//    whole process group ends it first) is interrupted too, never a "crash".
#pragma once
#include <signal.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/core/error.h"

namespace oomlab {

struct ChildOutcome {
  std::string status;          // ok | oom | diverged | error | crash | timeout
  int exit_code = -1;          // when it exited
  int signal = 0;              // when a signal ended it
  double seconds = 0;
  std::string message;
};

struct Interrupted : Error {
  Interrupted(int sig, const std::string& what) : Error(what), signal(sig) {}
  int signal;
};

class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction old_[3];
};
// The signal an InterruptGuard caught (0: none).
int interrupt_signal();

// on_line (optional) sees each line the child writes, as it appears (progress of long points).
ChildOutcome run_child(const std::string& executable, const std::vector<std::string>& args, double timeout_s,
                       const std::string& log_path,
                       const std::function<void(const std::string& line)>& on_line = {});

// The absolute path of the running executable (/proc/self/exe).
std::string self_executable();

}  // namespace oomlab
