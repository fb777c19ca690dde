// atomic_file.h — crash-safe file replacement, strict JSON output, whole-file reads.
// Contracts:
//  * write_file_atomic: the target is either its old content or the complete new content,
//    never a mix: temp file in the same directory (mkstemp), write all, fsync, close,
//    rename over the target, fsync the directory. New files get mode 0644; an existing
//    target keeps its mode. On any failure the temp is removed and IoError names the path.
//    The temp is ".<name>.tmp.<pid>.XXXXXX"; one whose writer died before its rename (kill
//    -9, SIGTERM's default action) is removed at the next write of the same target.
//  * write_json_atomic / dump_json_strict reject NaN and +-Inf (nlohmann would write
//    `null`): ValueError naming the key path, e.g. "metrics.curve[3].loss".
//    Where the bytes go is file_kinds.h's resolve_output: /dev/stdout and the like through
//    this process's descriptor; a device or FIFO in place (nothing to rename over; a FIFO
//    waits at most 30 s for a reader, then IoError: never a hang); a
//    symlink's final target replaced atomically, the link kept.
//  * read_file reads regular files only (file_kinds.h: a FIFO is an error, never a hang).
//  * check_output_file / check_output_dir: a result's location is checked before any work
//    (not after hours of it) without opening it (a FIFO's waiting reader would see end-of-file):
//    IoError naming `what` (e.g. "the results file") and the path when it
//    is a directory (file) or a file (dir), or its directory does not exist or is not
//    writable. Writability is probed by creating and removing a temp file (access(2) says
//    yes to root on read-only places). Neither creates anything: a missing directory passes
//    when its nearest existing ancestor is a writable directory (the run creates it).
//  * atomic_write_fault_hook(): test-only; when set it is called with the temp path after
//    the fsync and before the rename, and may throw to simulate a crash at that point.
#pragma once
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace oomlab {

void write_file_atomic(const std::string& path, std::string_view bytes);

void check_output_file(const std::string& path, const std::string& what);
// An existing writable directory, or a missing one whose nearest existing ancestor is one.
void check_output_dir(const std::string& path, const std::string& what);

// Throws ValueError naming the first non-finite number's key path.
void check_json_finite(const nlohmann::json& j);
void check_json_finite(const nlohmann::ordered_json& j);
// check_json_finite + dump (indent < 0: compact) + trailing newline; invalid UTF-8 -> ValueError.
std::string dump_json_strict(const nlohmann::json& j, int indent = 2);
std::string dump_json_strict(const nlohmann::ordered_json& j, int indent = 2);
void write_json_atomic(const std::string& path, const nlohmann::json& j, int indent = 2);
void write_json_atomic(const std::string& path, const nlohmann::ordered_json& j, int indent = 2);

// Whole file as bytes; IoError naming the path when it cannot be opened or read.
std::string read_file(const std::string& path);

std::function<void(const std::string& temp_path)>& atomic_write_fault_hook();

}  // namespace oomlab
