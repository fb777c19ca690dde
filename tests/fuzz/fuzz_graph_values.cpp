// fuzz_graph_values.cpp — libFuzzer target for the model-graph importer behind the reader
// (models/graph_model.h): the values a graph file gives its ops (dims, indices, sizes,
// constants), mutated in the shipped graphs (models/graphs/*.json), then the file read,
// the model built and run as `oomlab summary` and `oomlab estimate` run it (a summary on the
// meta device, two training steps on meta with the chosen optimizer and checkpoint policy).
// Input: byte 0 picks the graph (sorted file names, modulo their count); byte 1 the run
// (bits 0-1: batch 1-4; bit 2: adam instead of sgd; bits 3-4: checkpoint none, all, sqrt,
// selective:attention); then 12-byte records, each one mutation applied in order:
//   kind (u8: low 2 bits: 0 a node's integer argument, 1 a parameter's shape, 2 an integer
//   buffer's value, 3 a node output's shape; bit 7: the value is picked from kInteresting
//   by the low byte of the value field), where (u16 LE: node / parameter, modulo the count),
//   slot (u8: which integer of the arguments in document order / dim / value, modulo),
//   value (int64 LE).
// Expected rejections: oomlab::Error (the reader's IoError, the importer's ValueError naming
// file, node and argument, NotImplementedError for an unsupported use, OutOfMemoryError).
// Findings: InternalError, any other exception, a signal, a sanitizer report (ASan/UBSan).
// Seeds: tests/fuzz/corpus/fuzz_graph_values/ (oomlab_fuzz_make_seeds writes them: each
// graph unmutated, and its dims, indices and constants set out of range). Run from the
// repository root (scripts/fuzz.sh does).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_common.h"
#include "tests/fuzz/fuzz_graph_run.h"

using json = nlohmann::json;

namespace {

constexpr int64_t kInteresting[] = {0, 1, -1, 2, -2, 3, 7, -9, 64, 128, 1 << 20, INT32_MAX, int64_t(1) << 32,
                                    int64_t(1) << 62, INT64_MAX, INT64_MIN, INT64_MIN + 1, -(int64_t(1) << 40)};

const std::vector<json>& shipped_graphs() {
  static const std::vector<json> graphs = [] {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator("models/graphs"))
      if (e.path().extension() == ".json") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    oomlab_fuzz::fuzz_require(!files.empty(), "no models/graphs/*.json: run from the repository root");
    std::vector<json> out;
    for (const std::string& f : files) {
      std::ifstream in(f);
      out.push_back(json::parse(in));
    }
    return out;
  }();
  return graphs;
}

// The integer leaves of a JSON value in document order (a node's args and kwargs).
void integer_leaves(json& j, std::vector<json*>& out) {
  if (j.is_number_integer()) out.push_back(&j);
  else if (j.is_array() || j.is_object())
    for (json& e : j) integer_leaves(e, out);
}

int64_t read_i64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  int64_t out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}

void mutate(json& g, const uint8_t* r) {
  const int kind = r[0] & 3;
  const size_t where = size_t(r[1]) | (size_t(r[2]) << 8), slot = r[3];
  const int64_t value =
      (r[0] & 0x80) ? kInteresting[r[4] % (sizeof kInteresting / sizeof kInteresting[0])] : read_i64(r + 4);
  auto pick = [](json& list, size_t i) -> json* {
    return list.is_array() && !list.empty() ? &list[i % list.size()] : nullptr;
  };
  std::vector<json*> leaves;
  if (kind == 0) {
    json* n = pick(g["nodes"], where);
    if (!n) return;
    integer_leaves((*n)["args"], leaves);
    if (n->contains("kwargs")) integer_leaves((*n)["kwargs"], leaves);
  } else if (kind == 1) {
    json* p = pick(g["parameters"], where);
    if (p) integer_leaves((*p)["shape"], leaves);
  } else if (kind == 2) {
    std::vector<json*> buffers;
    for (json& p : g["parameters"])
      if (p.contains("values")) buffers.push_back(&p);
    if (!buffers.empty()) integer_leaves((*buffers[where % buffers.size()])["values"], leaves);
  } else {
    json* n = pick(g["nodes"], where);
    if (n) integer_leaves((*n)["outputs"], leaves);
  }
  if (!leaves.empty()) *leaves[slot % leaves.size()] = value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::vector<json>& graphs = shipped_graphs();
  json g = graphs[data[0] % graphs.size()];
  for (size_t at = 2; at + 12 <= size && at < 2 + 12 * 16; at += 12) mutate(g, data + at);
  static oomlab_fuzz::TempFile file("fuzz_graph_values.json");
  oomlab_fuzz::run_graph_file(file.write(g.dump()), data[1]);
  return 0;
}
