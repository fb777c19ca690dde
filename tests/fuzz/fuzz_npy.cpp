// fuzz_npy.cpp — libFuzzer target for the .npy reader (engine/io/npy.h).
// Input: the bytes of a .npy file, given to parse_npy(bytes, name).
// Expected rejections: oomlab::Error (IoError naming the file and the problem). Findings: any
// other exception, a sanitizer report, or a parsed array that disagrees with itself: data
// size != numel x itemsize, a negative dimension, or an element accessor reading out of
// bounds (every element is read back with float_at / int_at).
// Seeds: tests/fuzz/corpus/fuzz_npy/ (real files written by NumPy 2.4's np.save and
// np.lib.format.write_array: every supported type, a 0-d array, format 2.0); dictionary:
// tests/fuzz/fuzz_npy.dict.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/core/error.h"
#include "engine/io/npy.h"
#include "tests/fuzz/fuzz_common.h"

using oomlab_fuzz::fuzz_require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const oomlab::NpyArray a = oomlab::parse_npy(std::string_view(reinterpret_cast<const char*>(data), size), "f.npy");
    for (int64_t d : a.shape) fuzz_require(d >= 0, "negative dimension");
    fuzz_require(a.data.size() == size_t(a.numel()) * a.itemsize(), "data size != numel * itemsize");
    double sum = 0;
    for (int64_t i = 0, n = a.numel(); i < n; ++i) sum += a.is_integer() ? double(a.int_at(i)) : a.float_at(i);
    (void)sum;
  } catch (const oomlab::Error&) {
  }
  return 0;
}
