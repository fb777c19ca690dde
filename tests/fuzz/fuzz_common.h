// fuzz_common.h — helpers shared by the libFuzzer targets in tests/fuzz/ (built only with
// -DOOMLAB_FUZZ=ON; run by scripts/fuzz.sh).
// Contract of every target: an oomlab::Error (engine/core/error.h) or a nlohmann::json
// exception from parsing the raw bytes as JSON is an expected rejection of bad input and is
// caught; any other exception, an abort, or a sanitizer report is a finding and escapes
// (libFuzzer stops and writes the input as crash-*). Properties a target checks beyond
// "does not crash" fail through fuzz_require(), which aborts with a message.
#pragma once
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

namespace oomlab_fuzz {

// Aborts (a finding) when a checked property does not hold.
inline void fuzz_require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property violated: %s\n", what);
    std::abort();
  }
}

// One temp file per process ($TMPDIR or /tmp), overwritten by each input and removed when the
// process exits normally (libFuzzer's -max_total_time / -runs end with exit()). A crashing
// run may leave it behind; scripts/fuzz.sh points TMPDIR at a directory it deletes.
class TempFile {
 public:
  explicit TempFile(const char* stem) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/" + stem + "-" + std::to_string(getpid());
  }
  ~TempFile() { std::remove(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  // Replaces the file's contents with `bytes`; returns its path.
  const std::string& write(std::string_view bytes) {
    std::ofstream f(path_, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    f.close();
    fuzz_require(bool(f), "cannot write the fuzzer's temp file");
    return path_;
  }

 private:
  std::string path_;
};

}  // namespace oomlab_fuzz
