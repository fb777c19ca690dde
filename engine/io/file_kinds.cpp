// file_kinds.cpp — regular-file opens that never block, and where an output path leads
// (file_kinds.h).
#include "engine/io/file_kinds.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "engine/core/error.h"

namespace oomlab {
namespace {
namespace fs = std::filesystem;

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && s.find_first_not_of("0123456789") == std::string::npos;
}

// The descriptor number a path names, if it names one of this process's descriptors.
std::optional<int> descriptor_named(const std::string& p) {
  if (p == "/dev/stdin") return 0;
  if (p == "/dev/stdout") return 1;
  if (p == "/dev/stderr") return 2;
  std::string rest;
  if (p.rfind("/dev/fd/", 0) == 0) {
    rest = p.substr(8);
  } else if (p.rfind("/proc/", 0) == 0) {
    const std::string tail = p.substr(6);
    const size_t slash = tail.find('/');
    if (slash == std::string::npos) return std::nullopt;
    const std::string who = tail.substr(0, slash);
    const bool self = who == "self" || who == "thread-self" || who == std::to_string(::getpid());
    if (!self || tail.compare(slash, 4, "/fd/") != 0) return std::nullopt;
    rest = tail.substr(slash + 4);
  }
  if (!all_digits(rest)) return std::nullopt;
  return std::stoi(rest);
}

OutputTarget descriptor_target(int fd, const std::string& path) {
  const int flags = ::fcntl(fd, F_GETFL);
  OOMLAB_CHECK_T(IoError, flags >= 0, "cannot write ", path, ": file descriptor ", fd, " is not open");
  OOMLAB_CHECK_T(IoError, (flags & O_ACCMODE) != O_RDONLY, "cannot write ", path, ": file descriptor ", fd,
                 " is open for reading only");
  return OutputTarget{OutputTarget::descriptor, path, fd};
}
}  // namespace

std::string file_kind_name(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

int open_regular_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO with no writer returns at once instead of waiting forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  OOMLAB_CHECK_T(IoError, fd >= 0, "cannot read ", path, ": ", std::strerror(errno));
  struct stat st;
  const bool known = ::fstat(fd, &st) == 0;
  if (!known || !S_ISREG(st.st_mode)) {
    const std::string kind = known ? file_kind_name(st.st_mode) : std::strerror(errno);
    ::close(fd);
    throw IoError(str_cat("cannot read ", path, ": it is ", kind, ", not a regular file"));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

OutputTarget resolve_output(const std::string& path) {
  std::string cur = path;
  for (int hop = 0; hop < 40; ++hop) {
    const std::string norm = fs::path(cur).lexically_normal().string();
    if (auto fd = descriptor_named(norm)) return descriptor_target(*fd, path);
    struct stat st;
    if (::lstat(cur.c_str(), &st) != 0) return OutputTarget{OutputTarget::regular, cur, -1};   // new (or dangling)
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      const fs::path target = fs::read_symlink(cur, ec);
      OOMLAB_CHECK_T(IoError, !ec, "cannot write ", path, ": cannot read the link ", cur, ": ", ec.message());
      cur = target.is_absolute() ? target.string() : (fs::path(cur).parent_path() / target).string();
      continue;
    }
    if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) return OutputTarget{OutputTarget::regular, cur, -1};
    return OutputTarget{OutputTarget::special, cur, -1};
  }
  throw IoError(str_cat("cannot write ", path, ": too many levels of symbolic links"));
}

bool is_standard_output(const std::string& path) {
  struct stat out{}, target{};
  if (::fstat(STDOUT_FILENO, &out) != 0 || ::stat(path.c_str(), &target) != 0) return false;
  return out.st_dev == target.st_dev && out.st_ino == target.st_ino;
}

bool same_output_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  const fs::path pa = fs::absolute(a, ec).lexically_normal(), pb = fs::absolute(b, ec).lexically_normal();
  if (pa == "/dev/null" || pb == "/dev/null") return false;
  if (pa == pb) return true;
  return fs::exists(pa, ec) && fs::exists(pb, ec) && fs::equivalent(pa, pb, ec);
}

}  // namespace oomlab
