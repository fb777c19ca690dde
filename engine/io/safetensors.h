// safetensors.h — read/write the safetensors format (huggingface/safetensors) for
// checkpoints and state dicts.
// Layout: u64 little-endian header length N | JSON header (N bytes, space-padded so the
// data starts 8-byte aligned) | data. Header: {"__metadata__": {str: str},
// "name": {"dtype": "F32"|"F64"|"F16"|"BF16"|"I64"|"U8", "shape": [...],
// "data_offsets": [begin, end]}} with offsets relative to the data section. The header
// keeps insertion order; the data is laid out largest itemsize first so every tensor is
// aligned to its itemsize (as the reference writer guarantees for mmap readers).
// Integrity: the writer adds metadata "oomlab_crc32" (zlib CRC32 of the data section, 8
// lowercase hex digits); the reader verifies it when present. Every malformed file is an
// IoError naming the file and the problem. Files are written with write_file_atomic.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"

namespace oomlab {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using TensorMetadata = std::map<std::string, std::string>;
inline constexpr const char* kSafetensorsCrcKey = "oomlab_crc32";

struct SafetensorsContents {
  NamedTensors tensors;     // cpu, contiguous, in header order
  TensorMetadata metadata;  // includes oomlab_crc32 when the file has it
};

// Tensors may live on any device except meta (copied to the host first) and need not be
// contiguous. Names must be unique, non-empty and not "__metadata__" (ValueError).
std::string serialize_safetensors(const NamedTensors& tensors, const TensorMetadata& metadata = {});
SafetensorsContents parse_safetensors(std::string_view bytes, const std::string& file_name);

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const TensorMetadata& metadata = {});
SafetensorsContents read_safetensors(const std::string& path);

// Copies the file's tensors into existing ones (any device; destinations contiguous).
// Shapes and dtypes must match exactly; strict also requires the names to match both
// ways. Every problem is collected into one IoError listing missing keys, unexpected keys,
// shape and dtype mismatches; nothing is copied unless all checks pass.
struct LoadReport {
  std::vector<std::string> missing, unexpected;  // non-empty only when !strict
  TensorMetadata metadata;
};
// `aliases` (file name -> target name): a tied weight's second name (GPT-2's
// transformer.wte.weight is lm_head.weight): in the file it is neither loaded nor
// unexpected, but must hold exactly the values of the tensor it aliases when both are there.
LoadReport load_into(const std::string& path, const NamedTensors& targets, bool strict = true,
                     const std::map<std::string, std::string>& aliases = {});

// "F32", "BF16", ... and back (nullopt-like: returns false for unknown strings).
const char* safetensors_dtype_name(DType t);
bool parse_safetensors_dtype(std::string_view s, DType& out);

}  // namespace oomlab
