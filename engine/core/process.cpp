// process.cpp — process_gone (process.h): kill(pid, 0), then the state in /proc/<pid>/stat.
#include "engine/core/process.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace oomlab {

bool process_gone(long pid) {
  if (pid <= 0 || pid == long(::getpid())) return false;
  if (::kill(pid_t(pid), 0) != 0) return errno == ESRCH;
  // "pid (comm) S ...": the state follows the last ')' (comm may hold spaces and parentheses)
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), {});
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && (stat[close + 2] == 'Z' || stat[close + 2] == 'X');
}

}  // namespace oomlab
