// atomic_file.cpp — write-temp/fsync/rename/fsync-dir, the strict JSON walk, read_file.
#include "engine/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/core/error.h"
#include "engine/core/process.h"
#include "engine/io/file_kinds.h"

namespace oomlab {
namespace {

std::string errno_str(int e) { return std::strerror(e); }

// Removes the temp file (and closes its fd) unless committed.
struct TempGuard {
  std::string path;
  int fd = -1;
  bool committed = false;
  ~TempGuard() {
    if (fd >= 0) ::close(fd);
    if (!committed && !path.empty()) ::unlink(path.c_str());
  }
};

template <class J>
void walk_finite(const J& j, std::string& key_path) {
  if (j.is_number_float()) {
    double v = j.template get<double>();
    if (!std::isfinite(v))
      throw ValueError(str_cat("strict JSON: non-finite number ", v, " at ",
                               key_path.empty() ? std::string("<root>") : key_path,
                               " (JSON has no NaN/Infinity; record null or a string explicitly)"));
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      size_t len = key_path.size();
      key_path += (len ? "." : "") + it.key();
      walk_finite(it.value(), key_path);
      key_path.resize(len);
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      size_t len = key_path.size();
      key_path += "[" + std::to_string(i) + "]";
      walk_finite(j[i], key_path);
      key_path.resize(len);
    }
  }
}

template <class J>
std::string dump_strict(const J& j, int indent) {
  std::string kp;
  walk_finite(j, kp);
  try {
    return j.dump(indent) + "\n";
  } catch (const nlohmann::json::exception& e) {
    throw ValueError(str_cat("strict JSON: cannot serialise: ", e.what()));
  }
}

void write_all(int fd, const std::string& path, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw IoError(str_cat("cannot write ", path, ": ", errno_str(errno)));
    }
    done += size_t(w);
  }
}

// One of this process's descriptors (/dev/stdout ...): written through it, at its offset,
// after what stdio has buffered for it.
void write_to_descriptor(int fd, const std::string& path, std::string_view bytes) {
  if (fd == 1) std::fflush(stdout);
  if (fd == 2) std::fflush(stderr);
  write_all(fd, path, bytes);
}

// How long a FIFO output waits for a reader before the write is an error (never a hang).
constexpr int kFifoReaderWaitMs = 30000;

// Opens a device or FIFO for writing. A FIFO with no reader yet is retried every 50 ms for
// kFifoReaderWaitMs (a plain open would block forever); then the descriptor blocks as usual.
int open_special_for_writing(const std::string& path) {
  for (int waited = 0;; waited += 50) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    if (errno != ENXIO) throw IoError(str_cat("cannot write ", path, ": ", errno_str(errno)));
    if (waited >= kFifoReaderWaitMs)
      throw IoError(str_cat("cannot write ", path, ": nobody read the FIFO within ", kFifoReaderWaitMs / 1000, " s"));
    ::usleep(50000);
  }
}

// A device or FIFO (/dev/null, a named pipe): written in place, as a shell redirect would.
void write_special_file(const std::string& path, std::string_view bytes) {
  const int fd = open_special_for_writing(path);
  try {
    write_all(fd, path, bytes);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}
}  // namespace

namespace {
// Creates and removes a temp file in `dir`: the one test of writability that holds for root
// and for read-only or pseudo filesystems (/proc), where access(2) says yes.
void probe_writable(const std::string& dir, const std::string& what, const std::string& target) {
  std::string templ = (std::filesystem::path(dir) / ".oomlab-probe.XXXXXX").string();
  const int fd = ::mkstemp(templ.data());
  if (fd < 0) throw IoError(str_cat(what, ": cannot write ", target, ": directory ", dir, " is not writable (",
                                    errno_str(errno), ")"));
  ::close(fd);
  ::unlink(templ.c_str());
}
}  // namespace

void check_output_file(const std::string& path0, const std::string& what) {
  namespace fs = std::filesystem;
  OOMLAB_CHECK_T(IoError, !path0.empty(), what, ": the file name is empty");
  const OutputTarget target = resolve_output(path0);   // IoError for a closed or read-only descriptor
  if (target.kind == OutputTarget::descriptor) return;
  const std::string& path = target.path;
  struct stat st;
  if (target.kind == OutputTarget::special) {
    // Never opened here: a FIFO's reader would see this open's close as end-of-file and leave.
    OOMLAB_CHECK_T(IoError, ::access(path.c_str(), W_OK) == 0, what, ": cannot write ", path0, ": ", errno_str(errno));
    return;
  }
  if (::stat(path.c_str(), &st) == 0)
    OOMLAB_CHECK_T(IoError, !S_ISDIR(st.st_mode), what, ": cannot write ", path0,
                   ": it is a directory (give a file name)");
  const fs::path p(path);
  OOMLAB_CHECK_T(IoError, !p.filename().empty() && p.filename() != "." && p.filename() != "..", what, ": cannot write ",
                 path, ": not a file name");
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : std::string(".");
  const bool dir_exists = ::stat(dir.c_str(), &st) == 0;
  OOMLAB_CHECK_T(IoError, dir_exists, what, ": cannot write ", path, ": directory ", dir, " does not exist");
  OOMLAB_CHECK_T(IoError, S_ISDIR(st.st_mode), what, ": cannot write ", path, ": ", dir, " is not a directory");
  probe_writable(dir, what, path);
}

void check_output_dir(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  OOMLAB_CHECK_T(IoError, !path.empty(), what, ": the directory name is empty");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    OOMLAB_CHECK_T(IoError, S_ISDIR(st.st_mode), what, ": cannot use ", path, ": it is not a directory");
    probe_writable(path, what, path);
    return;
  }
  // Missing: the run will create it, so its nearest existing ancestor must be a writable
  // directory. Nothing is created here: a command refused later leaves no trace.
  const fs::path target = fs::path(path).lexically_normal();
  const fs::path root = target.is_absolute() ? fs::path("/") : fs::path(".");
  fs::path ancestor = target;
  bool found = false;
  while (!found && ancestor != root) {
    ancestor = ancestor.has_relative_path() && ancestor.has_parent_path() ? ancestor.parent_path() : root;
    if (ancestor.empty()) ancestor = root;
    found = ::stat(ancestor.c_str(), &st) == 0;
  }
  OOMLAB_CHECK_T(IoError, found, what, ": cannot create ", path, ": no existing parent directory");
  OOMLAB_CHECK_T(IoError, S_ISDIR(st.st_mode), what, ": cannot create ", path, ": ", ancestor.string(),
                 " is not a directory");
  probe_writable(ancestor.string(), what, path);
}

std::function<void(const std::string&)>& atomic_write_fault_hook() {
  static std::function<void(const std::string&)> hook;
  return hook;
}

namespace {
// Temps left by writers that died before their rename (kill -9, a signal's default action):
// ".<name>.tmp.<pid>.XXXXXX" whose pid no longer runs. Removed before the next write of the
// same target (a pid reused meanwhile keeps its temp until the one after).
void remove_dead_writers_temps(const std::filesystem::path& dir, const std::string& prefix) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());   // "<pid>.XXXXXX"
    const size_t dot = rest.find('.');
    if (dot == 0 || dot == std::string::npos || rest.find_first_not_of("0123456789") != dot) continue;
    const long pid = std::strtol(rest.substr(0, dot).c_str(), nullptr, 10);
    if (process_gone(pid)) {
      std::error_code rm;
      std::filesystem::remove(it->path(), rm);
    }
  }
}
}  // namespace

void write_file_atomic(const std::string& path_given, std::string_view bytes) {
  namespace fs = std::filesystem;
  const OutputTarget out = resolve_output(path_given);
  if (out.kind == OutputTarget::descriptor) return write_to_descriptor(out.fd, path_given, bytes);
  if (out.kind == OutputTarget::special) return write_special_file(out.path, bytes);
  const std::string& path = out.path;   // a symlink's final target: the link stays
  const fs::path target(path);
  OOMLAB_CHECK_T(IoError, !target.filename().empty(), "cannot write ", path, ": not a file path");
  const std::string dir = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  auto fail = [&](const std::string& step, int e) {
    return IoError(str_cat("cannot write ", path, ": ", step, " failed: ", errno_str(e)));
  };

  mode_t mode = 0644;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw IoError(str_cat("cannot write ", path, ": it is a directory"));
    mode = st.st_mode & 07777;
  }

  TempGuard tmp;
  const std::string prefix = "." + target.filename().string() + ".tmp.";
  remove_dead_writers_temps(dir, prefix);
  std::string templ = (fs::path(dir) / (prefix + std::to_string(::getpid()) + ".XXXXXX")).string();
  std::vector<char> name(templ.begin(), templ.end());
  name.push_back('\0');
  int fd = ::mkstemp(name.data());
  if (fd < 0) throw fail(str_cat("creating a temp file in ", dir), errno);
  tmp.fd = fd;
  tmp.path = name.data();

  if (::fchmod(fd, mode) != 0) throw fail("fchmod", errno);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw fail(str_cat("write (", done, " of ", bytes.size(), " bytes written)"), errno);
    }
    done += size_t(w);
  }
  if (::fsync(fd) != 0) throw fail("fsync", errno);
  tmp.fd = -1;
  if (::close(fd) != 0) throw fail("close", errno);

  try {
    if (auto& hook = atomic_write_fault_hook()) hook(tmp.path);
  } catch (const std::exception& e) {
    throw IoError(str_cat("cannot write ", path, ": interrupted before rename: ", e.what()));
  }

  if (::rename(tmp.path.c_str(), path.c_str()) != 0) throw fail("rename", errno);
  tmp.committed = true;

  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd < 0) throw fail(str_cat("opening directory ", dir), errno);
  int rc = ::fsync(dfd), e = errno;
  ::close(dfd);
  if (rc != 0 && e != EINVAL && e != EROFS) throw fail(str_cat("fsync of directory ", dir), e);
}

void check_json_finite(const nlohmann::json& j) { std::string kp; walk_finite(j, kp); }
void check_json_finite(const nlohmann::ordered_json& j) { std::string kp; walk_finite(j, kp); }
std::string dump_json_strict(const nlohmann::json& j, int indent) { return dump_strict(j, indent); }
std::string dump_json_strict(const nlohmann::ordered_json& j, int indent) { return dump_strict(j, indent); }

namespace {
template <class J>
void write_json_atomic_impl(const std::string& path, const J& j, int indent) {
  std::string text;
  try {
    text = dump_strict(j, indent);
  } catch (const ValueError& e) {
    throw ValueError(str_cat("cannot write ", path, ": ", e.what()));
  }
  write_file_atomic(path, text);
}
}  // namespace

void write_json_atomic(const std::string& path, const nlohmann::json& j, int indent) {
  write_json_atomic_impl(path, j, indent);
}
void write_json_atomic(const std::string& path, const nlohmann::ordered_json& j, int indent) {
  write_json_atomic_impl(path, j, indent);
}

std::string read_file(const std::string& path) {
  const int fd = open_regular_file(path);
  FILE* f = ::fdopen(fd, "rb");
  if (!f) {
    const int e = errno;
    ::close(fd);
    throw IoError(str_cat("cannot read ", path, ": ", errno_str(e)));
  }
  std::string out;
  struct stat st;
  if (::fstat(::fileno(f), &st) == 0 && S_ISREG(st.st_mode)) out.reserve(size_t(st.st_size));
  char buf[1 << 16];
  size_t r;
  while ((r = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, r);
  bool err = std::ferror(f) != 0;
  int e = errno;
  std::fclose(f);
  if (err) throw IoError(str_cat("cannot read ", path, ": ", errno_str(e)));
  return out;
}

}  // namespace oomlab
