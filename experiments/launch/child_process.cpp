// child_process.cpp — fork/exec with a timeout and an outcome (child_process.h).
#include "experiments/launch/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <thread>

#include "engine/core/error.h"
#include "experiments/launch/exit_codes.h"

namespace oomlab {
namespace {
// The last "oomlab: ..." error line of the log, else its last non-empty line.
std::string error_line(const std::string& log_path) {
  std::ifstream f(log_path);
  std::string line, last, last_error;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.rfind("oomlab: ", 0) == 0) last_error = line;
  }
  std::string m = last_error.empty() ? last : last_error;
  if (m.size() > 600) m = m.substr(0, 600) + "...";
  return m;
}
}  // namespace

std::string self_executable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  OOMLAB_CHECK_T(IoError, n > 0, "cannot resolve /proc/self/exe: ", std::strerror(errno));
  return std::string(buf, size_t(n));
}

namespace {
std::atomic<int> g_interrupt{0};
extern "C" void on_interrupt(int sig) { g_interrupt.store(sig); }
}  // namespace

int interrupt_signal() { return g_interrupt.load(); }

InterruptGuard::InterruptGuard() {
  g_interrupt.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
}

InterruptGuard::~InterruptGuard() {
  for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
}

namespace {
// Forks and execs `executable args...` with stdout and stderr into log_path.
pid_t spawn(const std::string& executable, const std::vector<std::string>& args, const std::string& log_path) {
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  OOMLAB_CHECK_T(IoError, log >= 0, "cannot create ", log_path, ": ", std::strerror(errno));
  std::vector<std::string> argv_s = {executable};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    throw IoError(str_cat("cannot start ", executable, ": fork failed: ", std::strerror(errno)));
  }
  if (pid == 0) {   // child: only async-signal-safe calls until exec
    // The point dies with the run (kill -9 of `oomlab run` runs no destructor): SIGKILL when
    // the parent goes, and at once if it went before this line.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execv(executable.c_str(), argv.data());
    const char msg[] = "oomlab: error: exec of the oomlab executable failed\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::close(log);
  return pid;
}

// The log as the child writes it, line by line, for on_line.
class LogFollower {
 public:
  LogFollower(const std::string& path, const std::function<void(const std::string&)>& on_line)
      : path_(path), on_line_(on_line) {}
  void pump() {
    if (!on_line_) return;
    if (!follow_.is_open()) follow_.open(path_, std::ios::binary);
    follow_.clear();
    char buf[4096];
    while (follow_.read(buf, sizeof buf) || follow_.gcount() > 0) {
      partial_.append(buf, size_t(follow_.gcount()));
      for (size_t nl; (nl = partial_.find('\n')) != std::string::npos; partial_.erase(0, nl + 1))
        on_line_(partial_.substr(0, nl));
      if (follow_.eof()) break;
    }
  }
  void finish() {
    pump();
    if (on_line_ && !partial_.empty()) on_line_(partial_);
  }

 private:
  std::string path_;
  const std::function<void(const std::string&)>& on_line_;
  std::ifstream follow_;
  std::string partial_;
};

struct Waited { int status = 0; bool timed_out = false; int interrupt = 0; };

// Waits for the child, stopping it (SIGTERM, SIGKILL 5 s later) past timeout_s or when the
// runner itself is interrupted.
Waited wait_child(pid_t pid, double timeout_s, std::chrono::steady_clock::time_point t0, LogFollower& log) {
  Waited w;
  bool term_sent = false;
  auto term_at = std::chrono::steady_clock::time_point::max();
  while (true) {
    const pid_t r = ::waitpid(pid, &w.status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) break;
    const auto now = std::chrono::steady_clock::now();
    if (const int sig = interrupt_signal(); sig && !term_sent) {   // the runner was told to stop
      ::kill(pid, SIGTERM);
      term_sent = true;
      term_at = now;
      w.interrupt = sig;
    } else if (timeout_s > 0 && !term_sent && std::chrono::duration<double>(now - t0).count() > timeout_s) {
      ::kill(pid, SIGTERM);
      term_sent = w.timed_out = true;
      term_at = now;
    } else if (term_sent && now - term_at > std::chrono::seconds(5)) {
      ::kill(pid, SIGKILL);
      term_at = std::chrono::steady_clock::time_point::max();
    }
    log.pump();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  log.finish();
  // A signal to the whole process group (Ctrl-C, `timeout`'s SIGTERM) can end the child
  // before this loop saw the runner's own flag: a point that did not finish is then stopped
  // by the interrupt, not a crash or an error of its own.
  const bool finished = WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0;
  if (!w.interrupt && !w.timed_out && !finished) w.interrupt = interrupt_signal();
  return w;
}

// timeout / crash / ok / oom / diverged / error from how the child ended.
void classify(const Waited& w, double timeout_s, const std::string& log_path, ChildOutcome& out) {
  if (w.timed_out) {
    out.status = "timeout";
    out.message = str_cat("still running after ", timeout_s, " s (stopped)");
    if (WIFSIGNALED(w.status)) out.signal = WTERMSIG(w.status);
    if (WIFEXITED(w.status)) out.exit_code = WEXITSTATUS(w.status);
  } else if (WIFSIGNALED(w.status)) {
    out.signal = WTERMSIG(w.status);
    out.status = "crash";
    out.message = str_cat("killed by signal ", out.signal, " (", ::strsignal(out.signal), ")");
    const std::string last = error_line(log_path);
    if (!last.empty()) out.message += "; last output: " + last;
  } else {
    out.exit_code = WIFEXITED(w.status) ? WEXITSTATUS(w.status) : -1;
    if (out.exit_code == 0) {
      out.status = "ok";
    } else {
      out.message = error_line(log_path);
      out.status = out.exit_code == kExitOutOfMemory ? "oom" : out.exit_code == kExitDiverged ? "diverged" : "error";
    }
  }
}
}  // namespace

ChildOutcome run_child(const std::string& executable, const std::vector<std::string>& args, double timeout_s,
                       const std::string& log_path, const std::function<void(const std::string& line)>& on_line) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = spawn(executable, args, log_path);
  LogFollower log(log_path, on_line);
  const Waited w = wait_child(pid, timeout_s, t0, log);
  ChildOutcome out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (w.interrupt) {
    out.status = "interrupted";
    out.signal = w.interrupt;
    throw Interrupted(out.signal, str_cat("interrupted by signal ", out.signal, " (", ::strsignal(out.signal),
                                          "); the point that was running was stopped"));
  }
  classify(w, timeout_s, log_path, out);
  return out;
}

}  // namespace oomlab
