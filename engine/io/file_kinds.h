// file_kinds.h — what a path names before oomlab reads or writes it: a regular file, one of
// this process's file descriptors, or another special file (a device, a FIFO).
// Contracts:
//  * open_regular_file: an fd (O_RDONLY, O_CLOEXEC, blocking) for a regular file; anything
//    else (a FIFO, a device, a directory, a socket) is an IoError naming the path and its
//    kind, raised without blocking (a FIFO with no writer would block a plain open forever).
//  * resolve_output: where a write to `path` goes. A path that names one of this process's
//    descriptors (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N, /proc/<pid>/fd/N,
//    directly or through symlinks) is that descriptor: written through it, at its offset,
//    never opened by name (opening /proc/self/fd/1 makes a new file description at offset 0,
//    and renaming over /dev/stdout replaces the symlink itself). A symlink to a regular file
//    is its final target (replaced atomically there, the link kept), as a shell redirect
//    writes through links. An existing device or FIFO is written in place, by name. A
//    missing path stays as it is (a new regular file).
#pragma once
#include <string>

namespace oomlab {

int open_regular_file(const std::string& path);

struct OutputTarget {
  enum Kind { regular, descriptor, special } kind = regular;
  std::string path;   // regular: the file to replace (symlinks followed); special: the path to open
  int fd = -1;        // descriptor: this process's fd
};
OutputTarget resolve_output(const std::string& path);
// Whether `path` is where this process's standard output goes (/dev/stdout, /proc/self/fd/1,
// or the very file stdout is redirected to): a "wrote PATH" line must not follow the bytes
// written there.
bool is_standard_output(const std::string& path);

// Whether a write to `a` would land in the file `b` names: the same path once made absolute
// and normal, or two names of one existing file (a symlink, /dev/stdout and /proc/self/fd/1).
// /dev/null is never the same file (it takes any number of outputs).
bool same_output_file(const std::string& a, const std::string& b);

// The kind of file `mode` describes, in words ("a FIFO", "a directory", ...).
std::string file_kind_name(unsigned mode);

}  // namespace oomlab
