// file_lock.cpp — ExclusiveFileLock (see file_lock.h).
#include "engine/io/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"

namespace oomlab {
namespace {

std::string holder_pid(int fd) {
  char buf[32] = {};
  const ssize_t got = pread(fd, buf, sizeof(buf) - 1, 0);
  std::string s = got > 0 ? std::string(buf, size_t(got)) : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "unknown" : s;
}

// Whether `path` still names the inode `fd` has open (false once a holder removed it).
bool names_this_file(const std::string& path, int fd) {
  struct stat by_fd {}, by_path {};
  return fstat(fd, &by_fd) == 0 && stat(path.c_str(), &by_path) == 0 && by_fd.st_dev == by_path.st_dev &&
         by_fd.st_ino == by_path.st_ino;
}

}  // namespace

ExclusiveFileLock::ExclusiveFileLock(std::string path, const std::string& what) : path_(std::move(path)) {
  for (;;) {
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    OOMLAB_CHECK_T(IoError, fd_ >= 0, what, ": cannot open the lock file ", path_, ": ", std::strerror(errno));
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string pid = holder_pid(fd_);
      close(fd_);
      fd_ = -1;
      OOMLAB_CHECK_T(IoError, err == EWOULDBLOCK, what, ": cannot lock ", path_, ": ", std::strerror(err));
      throw IoError(str_cat(what, " is being written by another process (pid ", pid, ", holding ", path_,
                            "); wait for it to finish or choose another output"));
    }
    if (names_this_file(path_, fd_)) break;
    close(fd_);   // its holder removed it as we opened it: lock the file now at the path
  }
  // The pid only names the holder in a refused run's message: a failed write leaves the lock held.
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) == 0) (void)!pwrite(fd_, pid.data(), pid.size(), 0);
}

ExclusiveFileLock::~ExclusiveFileLock() {
  if (fd_ < 0) return;
  unlink(path_.c_str());
  close(fd_);
}

}  // namespace oomlab
