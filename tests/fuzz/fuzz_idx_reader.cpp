// fuzz_idx_reader.cpp — libFuzzer target for the IDX reader (engine/data/idx_reader.h).
// Input: the bytes of one file (plain or gzip: zlib's gzread reads both), written to a
// per-process temp file and read with read_idx_images (28x28 as the trainer does, and any
// size: expect 0x0), and read_idx_labels (10 classes).
// Expected rejections: oomlab::Error (IoError naming the file and field). Findings: any other
// exception, a sanitizer report, or a returned result whose sizes disagree with its header
// (pixels != count*rows*cols, a label >= 10).
// Seeds: tests/fuzz/corpus/fuzz_idx_reader/ (tiny valid image/label files, plain and gzip).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/core/error.h"
#include "engine/data/idx_reader.h"
#include "tests/fuzz/fuzz_common.h"

using oomlab_fuzz::fuzz_require;

namespace {

void check_images(const std::string& path, int64_t rows, int64_t cols) {
  try {
    oomlab::IdxImages im = oomlab::read_idx_images(path, rows, cols);
    fuzz_require(im.count >= 0 && im.rows >= 0 && im.cols >= 0, "negative image dims");
    fuzz_require(rows <= 0 || im.rows == rows, "rows differ from the expected value");
    fuzz_require(cols <= 0 || im.cols == cols, "cols differ from the expected value");
    const unsigned __int128 n = static_cast<unsigned __int128>(im.count) * static_cast<unsigned __int128>(im.rows) *
                                static_cast<unsigned __int128>(im.cols);
    fuzz_require(n == im.pixels.size(), "pixels.size() != count * rows * cols");
  } catch (const oomlab::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static oomlab_fuzz::TempFile file("oomlab-fuzz-idx");
  const std::string& path = file.write(std::string_view(reinterpret_cast<const char*>(data), size));
  check_images(path, 28, 28);
  check_images(path, 0, 0);
  try {
    std::vector<uint8_t> labels = oomlab::read_idx_labels(path, 10);
    for (uint8_t v : labels) fuzz_require(v < 10, "label value >= num_classes");
  } catch (const oomlab::Error&) {
  }
  return 0;
}
