// rank_launcher.cpp — the one-machine job launcher (rank_launcher.h).
#include "experiments/launch/rank_launcher.h"

#include "engine/core/thread_budget.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "engine/core/error.h"
#include "experiments/launch/child_process.h"

extern char** environ;

namespace oomlab {
namespace {

int free_port() {   // the kernel's choice of a free port (closed again: a small race, as torchrun's)
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  OOMLAB_CHECK_T(IoError, fd >= 0, "launcher: socket() failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  OOMLAB_CHECK_T(IoError, ok, "launcher: no free port on 127.0.0.1");
  return ntohs(a.sin_port);
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  OOMLAB_CHECK_T(IoError, pid >= 0, "launcher: fork failed");
  if (pid == 0) {
    // A rank (or mpirun, which then stops its own) ends with the launcher, as torchrun's
    // workers do: SIGTERM when it goes, even by kill -9.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) std::_Exit(127);
    for (const std::string& kv : extra_env) ::putenv(const_cast<char*>(kv.c_str()));
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execvp(a[0], a.data());
    std::fprintf(stderr, "oomlab: error: launcher: cannot execute %s\n", a[0]);
    std::_Exit(127);
  }
  return pid;
}

int status_code(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

}  // namespace

int launch_local_job(const std::string& backend, int ranks, const std::vector<std::string>& args) {
  const std::string self = self_executable();
  std::vector<std::string> root_env;
  if (::geteuid() == 0) root_env = {"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"};
  // As torchrun: N processes on one machine share its cores; unless the user set
  // OMP_NUM_THREADS, each rank gets cores / N threads (torchrun sets 1) and is told so.
  if (ranks > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
    const int per_rank = std::max(1, hardware_threads() / ranks);
    root_env.push_back("OMP_NUM_THREADS=" + std::to_string(per_rank));
    std::fprintf(stderr, "launcher: OMP_NUM_THREADS=%d for each of the %d rank processes (%d cores); set it to "
                 "override\n", per_rank, ranks, hardware_threads());
  }
  if (backend == "mpi") {
    std::vector<std::string> argv = {"mpirun", "-np", std::to_string(ranks), "--oversubscribe", self};
    argv.insert(argv.end(), args.begin(), args.end());
    int st = 0;
    const pid_t pid = spawn(argv, root_env);
    while (::waitpid(pid, &st, 0) < 0) {}
    const int code = status_code(st);
    OOMLAB_CHECK_T(IoError, code != 127, "launcher: mpirun not found on PATH (Debian: openmpi-bin)");
    return code;
  }
  const int port = free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::string> argv = {self};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env = {"RANK=" + std::to_string(r), "LOCAL_RANK=" + std::to_string(r),
                                    "WORLD_SIZE=" + std::to_string(ranks), "LOCAL_WORLD_SIZE=" + std::to_string(ranks),
                                    "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port),
                                    str_cat("TORCHELASTIC_RUN_ID=oomlab-", ::getpid(), "-", port)};
    for (const std::string& kv : root_env)
      if (kv.rfind("OMP_NUM_THREADS=", 0) == 0) env.push_back(kv);
    pids.push_back(spawn(argv, env));
  }
  int first_failure = 0, running = ranks;
  auto stop_time = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid <= 0) {
      if (std::chrono::steady_clock::now() > stop_time)
        for (pid_t p : pids) if (p > 0) ::kill(p, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    for (pid_t& p : pids) {
      if (p != pid) continue;
      p = -1;
      --running;
      const int code = status_code(st);
      if (code != 0 && first_failure == 0) {   // torchrun: one rank failed, the job is over
        first_failure = code;
        for (pid_t q : pids) if (q > 0) ::kill(q, SIGTERM);
        stop_time = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      }
    }
  }
  return first_failure;
}

}  // namespace oomlab
