// make_seeds.cpp — writes the generated seed files of the fuzz corpora (not a fuzz target).
// Built with the fuzz targets (-DOOMLAB_FUZZ=ON) as oomlab_fuzz_make_seeds; run it once to
// regenerate: build-fuzz/oomlab_fuzz_make_seeds tests/fuzz/corpus
// It writes tiny valid inputs, each under 10 KB:
//   fuzz_idx_reader/: IDX image files (2x28x28, 3x4x5) and a label file, plain and gzip;
//   fuzz_safetensors/: files from the project's own serialize_safetensors (every dtype, a
//     scalar, an empty tensor, metadata only);
//   fuzz_graph_values/: records of mutations of the shipped graphs (fuzz_graph_values.cpp's
//     input; read from models/graphs/, so run it from the repository root): each graph as
//     it is, its first node of each op kind below (on the first two graphs with that op) with
//     a dim, an index, a size or a constant set out of range, a buffer's constant past its
//     table, the output's classes 0.
// The other corpora (trainer_state.json, experiment specs, command lines) are real files
// copied by hand; see docs/TESTS.md (fuzzing).
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/io/safetensors.h"

namespace {

std::string dir;

void put(const std::string& name, const std::string& bytes) {
  std::ofstream f(dir + "/" + name, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  if (!f) { std::fprintf(stderr, "cannot write %s/%s\n", dir.c_str(), name.c_str()); std::exit(1); }
}

void put_gz(const std::string& name, const std::string& bytes) {
  const std::string path = dir + "/" + name;
  gzFile f = gzopen(path.c_str(), "wb9");
  if (!f || gzwrite(f, bytes.data(), unsigned(bytes.size())) != int(bytes.size()) || gzclose(f) != Z_OK) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

void be32(std::string& s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s.push_back(char((v >> (8 * i)) & 0xff));
}

std::string idx_images(uint32_t n, uint32_t rows, uint32_t cols) {
  std::string s;
  be32(s, 2051); be32(s, n); be32(s, rows); be32(s, cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) s.push_back(char((i * 37u) & 0xff));
  return s;
}

std::string idx_labels(uint32_t n) {
  std::string s;
  be32(s, 2049); be32(s, n);
  for (uint32_t i = 0; i < n; ++i) s.push_back(char(i % 10));
  return s;
}

}  // namespace

// fuzz_graph_values' records: kind, where (u16 LE), slot, value (i64 LE).
void record(std::string& s, uint8_t kind, size_t where, size_t slot, int64_t value) {
  s.push_back(char(kind));
  s.push_back(char(where & 0xff));
  s.push_back(char((where >> 8) & 0xff));
  s.push_back(char(slot));
  for (int i = 0; i < 8; ++i) s.push_back(char((uint64_t(value) >> (8 * i)) & 0xff));
}

// A node's integer arguments in document order (as fuzz_graph_values counts them).
size_t integer_count(const nlohmann::json& j) {
  if (j.is_number_integer()) return 1;
  size_t n = 0;
  if (j.is_array() || j.is_object())
    for (const auto& e : j) n += integer_count(e);
  return n;
}

void graph_value_seeds() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator("models/graphs"))
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  // {op, which of its integer arguments, value}: dims, indices and sizes out of range
  struct Mutation { const char* op; size_t slot; int64_t value; };
  const Mutation kMutations[] = {{"aten.select.int", 0, 5},
                                 {"aten.select.int", 1, 1 << 20},
                                 {"aten.unsqueeze.default", 0, 7},
                                 {"aten.unsqueeze.default", 0, INT64_MIN},
                                 {"aten.gather.default", 0, -9},
                                 {"aten.cat.default", 0, 3},
                                 {"aten.slice.Tensor", 0, 9},
                                 {"aten.slice.Tensor", 3, 0},
                                 {"aten.expand.default", 0, -5},
                                 {"aten.view.default", 0, -7},
                                 {"getitem", 0, 2},
                                 {"aten.embedding.default", 0, 1 << 30},
                                 {"aten.convolution.default", 0, 0},
                                 {"aten.convolution.default", 8, 0},
                                 {"aten.max_pool2d_with_indices.default", 0, 0},
                                 {"aten.mean.dim", 0, 9},
                                 {"aten.split_with_sizes.default", 0, -1},
                                 {"aten.permute.default", 0, 4},
                                 {"_operator.mul", 0, INT64_MAX},
                                 {"aten.sym_size.int", 0, 3},
                                 {"aten.cumsum.default", 0, 2},
                                 {"aten.arange.start_step", 0, INT64_MIN},
                                 {"aten.squeeze.dims", 0, 6},
                                 {"aten.native_layer_norm.default", 0, 0}};
  // Each mutation on the first two graphs that have its op (CI replays every seed under ASan:
  // 121 seeds took 49 s, these about half); the unmutated graphs, buffers and outputs on all.
  std::vector<int> used(sizeof kMutations / sizeof kMutations[0], 0);
  for (size_t gi = 0; gi < files.size(); ++gi) {
    std::ifstream in(files[gi]);
    const nlohmann::json g = nlohmann::json::parse(in);
    const std::string stem = std::filesystem::path(files[gi]).stem().string();
    std::string plain{char(gi), char(1)};
    put(stem + "-plain", plain);
    for (size_t mi = 0; mi < used.size(); ++mi) {
      const Mutation& m = kMutations[mi];
      if (used[mi] >= 2) continue;
      const auto& nodes = g["nodes"];
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (nodes[i]["op"] != m.op) continue;
        if (integer_count(nodes[i]["args"]) + integer_count(nodes[i].value("kwargs", nlohmann::json::object())) <=
            m.slot)
          break;
        std::string s{char(gi), char(1)};
        record(s, 0, i, m.slot, m.value);
        put(stem + "-" + m.op + "-" + std::to_string(m.slot) + "-" + std::to_string(m.value), s);
        ++used[mi];
        break;
      }
    }
    for (size_t p = 0; p < g["parameters"].size(); ++p)   // a constant id past its table
      if (g["parameters"][p].contains("values")) {
        std::string s{char(gi), char(1)};
        record(s, 2, 0, 0, 1 << 30);
        put(stem + "-buffer-value", s);
        break;
      }
    std::string s{char(gi), char(6)};   // the output's classes 0, batch 3 with adam
    record(s, 3, g["nodes"].size() - 1, 1, 0);
    put(stem + "-output-classes-0", s);
  }
}

int main(int argc, char** argv) {
  using oomlab::DType;
  using oomlab::Tensor;
  if (argc != 2) { std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]); return 2; }
  const std::string root = argv[1];

  dir = root + "/fuzz_idx_reader";
  put("images-2x28x28.idx", idx_images(2, 28, 28));
  put_gz("images-2x28x28.idx.gz", idx_images(2, 28, 28));
  put("images-3x4x5.idx", idx_images(3, 4, 5));
  put("labels-12.idx", idx_labels(12));
  put_gz("labels-12.idx.gz", idx_labels(12));
  put("images-0x28x28.idx", idx_images(0, 28, 28));

  dir = root + "/fuzz_safetensors";
  put("mixed.safetensors",
      oomlab::serialize_safetensors({{"conv.weight", Tensor::from_vector({1, -2, 3.5, 0, 1e-3, 7}, {2, 3})},
                                     {"bn.num_batches_tracked", Tensor::from_vector_i64({5}, {})},
                                     {"mask", Tensor::from_vector({1, 0, 1}, {3}, DType::u8)}},
                                    {{"format", "pt"}, {"step", "2"}}));
  put("half.safetensors",
      oomlab::serialize_safetensors({{"h", Tensor::from_vector({0.5, -1, 65504}, {3}, DType::f16)},
                                     {"b", Tensor::from_vector({1, 2, 3, 4}, {2, 2}, DType::bf16)},
                                     {"d", Tensor::from_vector({3.25}, {1, 1}, DType::f64)}}));
  put("empty-tensor.safetensors", oomlab::serialize_safetensors({{"e", Tensor::zeros({0, 4})}}));
  put("metadata-only.safetensors", oomlab::serialize_safetensors({}, {{"note", "no tensors"}}));

  dir = root + "/fuzz_graph_values";
  std::filesystem::create_directories(dir);
  graph_value_seeds();
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
