// file_lock.h — one writer per output: an exclusive, non-blocking flock(2) on a lock file.
// Contracts:
//  * ExclusiveFileLock(path, what) creates `path` if needed and takes LOCK_EX | LOCK_NB on it;
//    while another process holds it, IoError naming `what`, the path and the holder's pid
//    (written into the file by the holder) — never a wait.
//  * The lock dies with its holder (kill -9 included: the kernel drops it), so a lock file
//    left behind never blocks a later run. The destructor removes the file while still
//    holding the lock; a process that opened the file before the removal sees, once locked,
//    that the path no longer names its inode and retries on the new file, so two holders
//    never coexist.
#pragma once
#include <string>

namespace oomlab {

class ExclusiveFileLock {
 public:
  ExclusiveFileLock(std::string path, const std::string& what);
  ~ExclusiveFileLock();
  ExclusiveFileLock(const ExclusiveFileLock&) = delete;
  ExclusiveFileLock& operator=(const ExclusiveFileLock&) = delete;

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace oomlab
