// fuzz_output_paths.cpp — libFuzzer target for where oomlab writes (engine/io/atomic_file.h,
// engine/io/file_kinds.h, engine/train/checkpoint.h): the third probe's special files and
// foreign checkpoint folders, as a fuzzed folder tree.
// Input: byte pairs building a tree in a per-process temp folder (regular files, folders,
// FIFOs, links to entries of the tree, dangling links, links to /dev/null), then one action
// on a fuzzed path: check_output_file, check_output_dir, write_file_atomic, or
// save_checkpoint of step N into a folder.
// Expected rejections: oomlab::Error (IoError naming the path). Findings: any other
// exception, a sanitizer report, a hang (libFuzzer's -timeout), or a broken contract:
//  * write_file_atomic that returns leaves the bytes readable at the path (through links);
//    a link written through stays a link; no temp file (".*.tmp.*") is left in the folder;
//  * save_checkpoint never removes or changes what the tree had (but the folder's `latest`,
//    oomlab's own pointer, which a successful save points at its step): every other file
//    the input made still exists with its content, whether the save succeeded or was refused.
// A FIFO is only ever checked, never written (a write waits up to 30 s for a reader).
// Seeds: tests/fuzz/corpus/fuzz_output_paths/.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/train/checkpoint.h"
#include "tests/fuzz/fuzz_common.h"

using oomlab_fuzz::fuzz_require;
namespace fs = std::filesystem;

namespace {
const char* const kNames[] = {"a", "b", "latest", "d", "d/step-1", "d/step-2", "d/step-1/notes.txt", "d/latest"};
constexpr int kNumNames = 8;

fs::path root_dir() {
  const char* dir = std::getenv("TMPDIR");
  return fs::path(dir && *dir ? dir : "/tmp") / ("fuzz_output_paths-" + std::to_string(::getpid()));
}

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Makes entry `what` at name `n`; records regular files' contents in `files`.
bool make_entry(const fs::path& root, uint8_t what, uint8_t n, std::map<fs::path, std::string>& files, bool* fifo) {
  const fs::path p = root / kNames[n % kNumNames];
  std::error_code ec;
  if (fs::exists(fs::symlink_status(p, ec))) return false;
  fs::create_directories(p.parent_path(), ec);
  switch (what % 6) {
    case 0: {
      std::ofstream(p) << "user " << int(n);
      if (fs::is_regular_file(p, ec)) files[p] = read_all(p);   // not when its folder could not be made
      break;
    }
    case 1: fs::create_directory(p, ec); break;
    case 2: if (::mkfifo(p.c_str(), 0600) == 0) *fifo = true; break;
    case 3: fs::create_symlink(kNames[(n / kNumNames) % kNumNames], p, ec); break;
    case 4: fs::create_symlink("/nonexistent/dangling", p, ec); break;
    default: fs::create_symlink("/dev/null", p, ec); break;
  }
  return true;
}

// `except`: the save folder's `latest`, oomlab's own pointer, which every save rewrites --
// under any of its names (a tree's link to the save folder names the same file).
void check_tree_kept(const std::map<fs::path, std::string>& files, const fs::path& except) {
  for (const auto& [p, content] : files) {
    std::error_code ec;
    if (p == except || fs::equivalent(p, except, ec)) continue;
    fuzz_require(fs::exists(p, ec), "a file of the tree was removed");
    fuzz_require(read_all(p) == content, "a file of the tree was changed");
  }
}

void act(const fs::path& root, uint8_t action, uint8_t n, bool fifo, const std::map<fs::path, std::string>& files) {
  const fs::path target = root / kNames[n % kNumNames];
  switch (action % 4) {
    case 0: oomlab::check_output_file(target.string(), "the results file"); break;
    case 1: oomlab::check_output_dir(target.string(), "the save folder"); break;
    case 2: {
      if (fifo) return;   // no reader here: the write would wait its 30 s
      std::error_code ec;   // the harness's own look-ups never throw (a path may loop)
      const bool was_link = fs::is_symlink(target, ec);
      oomlab::write_file_atomic(target.string(), "new");
      if (fs::is_regular_file(target, ec)) fuzz_require(read_all(target) == "new", "written bytes not at the path");
      if (was_link) fuzz_require(fs::is_symlink(target, ec), "a link written through was replaced");
      for (const auto& e : fs::recursive_directory_iterator(root, ec))
        fuzz_require(e.path().filename().string().find(".tmp.") == std::string::npos, "a temp file was left");
      break;
    }
    default: {
      if (fifo) return;
      oomlab::CheckpointData d;
      const int64_t step = 1 + (n / kNumNames) % 2;
      d.state = {{"step", step}};
      std::vector<std::string> written;
      try {
        oomlab::save_checkpoint(target.string(), step, d, &written);
      } catch (const oomlab::Error&) {
        check_tree_kept(files, target / "latest");
        throw;
      }
      check_tree_kept(files, target / "latest");
      std::error_code ec;
      if (fs::is_regular_file(target / "latest", ec))
        fuzz_require(read_all(target / "latest") == "step-" + std::to_string(step) + "\n",
                     "latest does not name the save");
    }
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const fs::path root = root_dir();
  std::error_code ec;
  fs::remove_all(root, ec);
  fs::create_directories(root);
  std::map<fs::path, std::string> files;
  bool fifo = false;
  size_t i = 0;
  for (int made = 0; i + 1 < size && made < 8 && data[i] != 0xff; i += 2, ++made)
    make_entry(root, data[i], data[i + 1], files, &fifo);
  if (i < size && data[i] == 0xff) ++i;
  try {
    if (i + 1 < size) act(root, data[i], data[i + 1], fifo, files);
  } catch (const oomlab::Error&) {
  }
  fs::remove_all(root, ec);
  return 0;
}
