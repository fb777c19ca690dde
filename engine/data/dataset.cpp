// dataset.cpp — Fashion-MNIST (normalised from the IDX bytes on access) and the seeded
// synthetic dataset (Philox streams per sample, see dataset.h).
#include "engine/data/dataset.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/data/idx_reader.h"

namespace oomlab {
namespace {

// The four N(0,1) values of Philox block `block` of (seed, stream): two (u1, u2) pairs, cos
// and sin branches of Box-Muller, in float: this runs in the loader thread and must keep up
// with a GPU step.
void normal4(uint64_t seed, uint64_t stream, uint64_t block, float v[4]) {
  constexpr float k24 = 1.0f / 16777216.0f;
  auto b = Generator::stream_block(seed, stream, block);
  for (int p = 0; p < 2; ++p) {
    float u1 = (float(b[2 * p] >> 8) + 1.0f) * k24;  // (0, 1]
    float u2 = float(b[2 * p + 1] >> 8) * k24;       // [0, 1)
    float r = std::sqrt(-2.0f * std::log(u1)), t = 6.28318530718f * u2;
    v[2 * p] = r * std::cos(t);
    v[2 * p + 1] = r * std::sin(t);
  }
}

// Fills out[0..n) with N(0,1) values from blocks first_block.. of (seed, stream).
void fill_normal(float* out, int64_t n, uint64_t seed, uint64_t stream, uint64_t first_block) {
  float v[4];
  for (int64_t i = 0; i < n; i += 4) {
    normal4(seed, stream, first_block + uint64_t(i / 4), v);
    for (int64_t k = 0; k < 4 && i + k < n; ++k) out[i + k] = v[k];
  }
}

// out[i] = prototype[i] + sigma * out[i], the prototype drawn as fill_normal(.., first_block 0)
// draws it: the same floats whether it comes from a table or from its stream.
void add_prototype(float* out, int64_t n, uint64_t seed, uint64_t stream, float sigma) {
  float v[4];
  for (int64_t i = 0; i < n; i += 4) {
    normal4(seed, stream, uint64_t(i / 4), v);
    for (int64_t k = 0; k < 4 && i + k < n; ++k) out[i + k] = v[k] + sigma * out[i + k];
  }
}

uint64_t mix_seed(uint64_t x) {  // splitmix64 finaliser: a key unrelated to `seed`
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void check_index(const Dataset& d, int64_t index) {
  OOMLAB_CHECK(index >= 0 && index < d.size(), d.name(), ": sample index ", index,
               " out of range [0, ", d.size(), ")");
}

}  // namespace

void Dataset::get_tokens(int64_t, std::vector<int64_t>&, int64_t*) const {
  throw InternalError(str_cat(name(), ": not a token dataset (input dtype ", dtype_name(input_dtype()), ")"));
}

const char* split_name(Split s) { return s == Split::train ? "train" : "test"; }

// ---- Fashion-MNIST ----------------------------------------------------------------------

FashionMnistDataset::FashionMnistDataset(Split split, const std::string& data_dir) : split_(split) {
  dir_ = find_fashion_mnist_dir(data_dir);
  bool train = split == Split::train;
  IdxPair p = read_idx_pair(fashion_mnist_file(dir_, train, true), fashion_mnist_file(dir_, train, false), 10);
  count_ = p.images.count; rows_ = p.images.rows; cols_ = p.images.cols;
  pixels_ = std::move(p.images.pixels);
  labels_ = std::move(p.labels);
}

void FashionMnistDataset::get(int64_t index, float* image_out, int64_t* label_out) const {
  check_index(*this, index);
  const int64_t n = rows_ * cols_;
  const uint8_t* src = pixels_.data() + index * n;
  constexpr float scale = 1.0f / (255.0f * kStd), shift = kMean / kStd;
  for (int64_t i = 0; i < n; ++i) image_out[i] = float(src[i]) * scale - shift;
  *label_out = labels_[size_t(index)];
}

std::string FashionMnistDataset::name() const {
  return str_cat("fashion-mnist/", split_name(split_));
}

// ---- synthetic ----------------------------------------------------------------------------

SyntheticImageDataset::SyntheticImageDataset(Shape chw, int64_t size, int64_t num_classes, uint64_t seed,
                                             bool learnable, float noise_sigma, int64_t max_table_bytes)
    : shape_(std::move(chw)), size_(size), num_classes_(num_classes), seed_(seed), learnable_(learnable),
      sigma_(noise_sigma) {
  OOMLAB_CHECK(shape_.size() == 3 && shape_[0] > 0 && shape_[1] > 0 && shape_[2] > 0,
               "synthetic dataset: sample shape must be positive (C, H, W), got ", shape_str(shape_));
  OOMLAB_CHECK(size_ >= 0, "synthetic dataset: size must be >= 0, got ", size_);
  OOMLAB_CHECK(num_classes_ >= 1, "synthetic dataset: num_classes must be >= 1, got ", num_classes_);
  OOMLAB_CHECK(std::isfinite(sigma_) && sigma_ >= 0, "synthetic dataset: noise sigma must be finite and >= 0");
  const int64_t n = shape_numel(shape_);
  OOMLAB_CHECK(uint64_t(n) / 4 + 1 < Generator::kStreamBlocks, "synthetic dataset: sample shape ", shape_str(shape_),
               " has more elements than one Philox stream per sample holds (2^32 blocks of 4)");
  if (!learnable_ || num_classes_ > max_table_bytes / int64_t(sizeof(float)) / n) return;
  prototypes_.resize(size_t(num_classes_ * n));
  for (int64_t c = 0; c < num_classes_; ++c)
    fill_normal(prototypes_.data() + c * n, n, mix_seed(seed_), uint64_t(c), 0);
}

void SyntheticImageDataset::get(int64_t index, float* image_out, int64_t* label_out) const {
  check_index(*this, index);
  const int64_t n = shape_numel(shape_);
  const uint64_t stream = uint64_t(index);
  auto b0 = Generator::stream_block(seed_, stream, 0);
  const int64_t label = int64_t((uint64_t(b0[0]) << 32 | b0[1]) % uint64_t(num_classes_));
  *label_out = label;
  fill_normal(image_out, n, seed_, stream, 1);
  if (!learnable_) return;
  if (prototypes_.empty()) return add_prototype(image_out, n, mix_seed(seed_), uint64_t(label), sigma_);
  const float* proto = prototypes_.data() + label * n;
  for (int64_t i = 0; i < n; ++i) image_out[i] = proto[i] + sigma_ * image_out[i];
}

std::string SyntheticImageDataset::name() const {
  return str_cat("synthetic(", shape_[0], "x", shape_[1], "x", shape_[2], ", n=", size_, ", classes=",
                 num_classes_, learnable_ ? ", learnable" : ", noise", ")");
}

SubsetDataset::SubsetDataset(std::shared_ptr<Dataset> base, int64_t begin, int64_t size, std::string name)
    : base_(std::move(base)), begin_(begin), size_(size), name_(std::move(name)) {
  OOMLAB_CHECK(base_ != nullptr, "SubsetDataset: no base dataset");
  OOMLAB_CHECK(begin_ >= 0 && size_ >= 0 && begin_ + size_ <= base_->size(), "SubsetDataset ", name_, ": range [",
               begin_, ", ", begin_ + size_, ") is outside ", base_->name(), " (", base_->size(), " samples)");
}

}  // namespace oomlab
