// make_seeds.cpp — writes the generated seed files of the fuzz corpora (not a fuzz target).
// Built with the fuzz targets (-DOOMLAB_FUZZ=ON) as oomlab_fuzz_make_seeds; run it once to
// regenerate: build-fuzz/oomlab_fuzz_make_seeds tests/fuzz/corpus
// It writes tiny valid inputs, each under 10 KB:
//   fuzz_idx_reader/: IDX image files (2x28x28, 3x4x5) and a label file, plain and gzip;
//   fuzz_safetensors/: files from the project's own serialize_safetensors (every dtype, a
//     scalar, an empty tensor, metadata only).
// The other corpora (trainer_state.json, experiment specs, command lines) are real files
// copied by hand; see tests/fuzz/README.md.
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

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
  std::printf("seeds written under %s\n", root.c_str());
  return 0;
}
