// fuzz_safetensors.cpp — libFuzzer target for the safetensors reader (engine/io/safetensors.h).
// Input: the bytes of a .safetensors file, given to parse_safetensors(bytes, name).
// Expected rejections: oomlab::Error (IoError naming the file and the problem). Findings: any
// other exception, a sanitizer report, or a broken round trip: a file that parses must
// serialize again (serialize_safetensors) and parse back to the same names, dtypes, shapes,
// bytes and metadata (the writer recomputes oomlab_crc32; names the writer refuses, the
// empty name, are skipped).
// Seeds: tests/fuzz/corpus/fuzz_safetensors/ (small files from serialize_safetensors, made by
// tests/fuzz/make_seeds.cpp); dictionary: tests/fuzz/fuzz_safetensors.dict.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

using oomlab_fuzz::fuzz_require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  oomlab::SafetensorsContents a;
  try {
    a = oomlab::parse_safetensors(bytes, "fuzz.safetensors");
  } catch (const oomlab::Error&) {
    return 0;
  }
  for (const auto& [name, t] : a.tensors)
    if (name.empty()) return 0;   // readable, but serialize_safetensors refuses it

  // Round trip: what we read, we can write, and it reads back the same.
  const std::string again = oomlab::serialize_safetensors(a.tensors, a.metadata);
  const oomlab::SafetensorsContents b = oomlab::parse_safetensors(again, "roundtrip.safetensors");
  fuzz_require(a.tensors.size() == b.tensors.size(), "round trip: tensor count differs");
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& [na, ta] = a.tensors[i];
    const auto& [nb, tb] = b.tensors[i];
    fuzz_require(na == nb, "round trip: names or order differ");
    fuzz_require(ta.dtype() == tb.dtype(), "round trip: dtype differs");
    fuzz_require(ta.shape() == tb.shape(), "round trip: shape differs");
    fuzz_require(ta.nbytes() == tb.nbytes(), "round trip: byte size differs");
    fuzz_require(ta.nbytes() == 0 || std::memcmp(ta.raw_data(), tb.raw_data(), size_t(ta.nbytes())) == 0,
                 "round trip: data differs");
  }
  for (const auto& [k, v] : a.metadata)
    if (k != oomlab::kSafetensorsCrcKey) {
      auto it = b.metadata.find(k);
      fuzz_require(it != b.metadata.end() && it->second == v, "round trip: metadata differs");
    }
  fuzz_require(b.metadata.count(oomlab::kSafetensorsCrcKey) == 1, "round trip: no CRC written");
  return 0;
}
