// synthetic_seg.cpp — shapes-on-background segmentation samples (see synthetic_seg.h).
// Per sample: block 0 = number of shapes, blocks 1.. = one block per shape (class,
// kind, centre, size), then normal noise from block 64 on (Box-Muller, 4 per block).
#include "engine/data/synthetic_seg.h"

#include <algorithm>
#include <cmath>

#include "engine/core/checked_math.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"

namespace oomlab {
namespace {
constexpr float k2Pi = 6.28318530718f;

uint64_t seg_mix(uint64_t x) {  // splitmix64 finaliser: the pattern stream's key
  x += 0x632BE59BD9B4E019ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

float unit(uint32_t w) { return uint_to_unit_float(w); }
}  // namespace

SyntheticSegmentationDataset::SyntheticSegmentationDataset(Shape chw, int64_t size, int64_t num_classes,
                                                           uint64_t seed, float noise_sigma, int64_t max_shapes)
    : shape_(std::move(chw)), size_(size), num_classes_(num_classes), max_shapes_(max_shapes), seed_(seed),
      sigma_(noise_sigma) {
  OOMLAB_CHECK(shape_.size() == 3 && shape_[0] > 0 && shape_[1] >= 4 && shape_[2] >= 4,
               "synthetic-seg: sample shape must be (C, H, W) with H, W >= 4, got ", shape_str(shape_));
  OOMLAB_CHECK(size_ >= 0, "synthetic-seg: size must be >= 0, got ", size_);
  OOMLAB_CHECK(num_classes_ >= 2, "synthetic-seg: needs >= 2 classes (background + 1), got ", num_classes_);
  // Philox blocks 1..63 of a sample hold its shapes, 64.. its noise; blocks 0..4094 of a class
  // its channels' levels, 4095 its stripes: within these, no two draws share a block.
  OOMLAB_CHECK(max_shapes_ >= 1 && max_shapes_ <= 63, "synthetic-seg: max_shapes must be in 1..63, got ",
               max_shapes_);
  OOMLAB_CHECK(shape_[0] <= 4095, "synthetic-seg: at most 4095 channels, got ", shape_[0]);
  OOMLAB_CHECK(std::isfinite(sigma_) && sigma_ >= 0, "synthetic-seg: noise sigma must be finite and >= 0");
  OOMLAB_CHECK(uint64_t(shape_numel(shape_)) / 4 + 65 < Generator::kStreamBlocks, "synthetic-seg: sample shape ",
               shape_str(shape_), " has more elements than one Philox stream per sample holds (2^32 blocks of 4)");
  const int64_t C = shape_[0];
  const uint64_t key = seg_mix(seed_);
  // per-class tables: a count that cannot be represented is a ShapeError, not a wrap
  const auto floats = [](int64_t a, int64_t b, const char* what) {
    return checked_nbytes(checked_mul(a, b, what), sizeof(float), what) / sizeof(float);
  };
  level_.resize(floats(num_classes_, C, "synthetic-seg: num_classes x channels"));
  freq_.resize(floats(num_classes_, 2, "synthetic-seg: num_classes x 2 frequencies"));
  for (int64_t k = 0; k < num_classes_; ++k) {
    for (int64_t c = 0; c < C; ++c) {
      auto b = Generator::block(key, uint64_t(k) * 4096, uint64_t(c));
      // Channel 0 spreads the classes evenly over [-1.5, 1.5] (separable even for C = 1);
      // other channels get random levels in the same range.
      level_[size_t(k * C + c)] =
          c == 0 ? -1.5f + 3.0f * float(k) / float(num_classes_ - 1) : -1.5f + 3.0f * unit(b[0]);
    }
    auto b = Generator::block(key, uint64_t(k) * 4096, 4095);
    freq_[size_t(2 * k)] = 0.05f + 0.2f * unit(b[0]);
    freq_[size_t(2 * k + 1)] = 0.05f + 0.2f * unit(b[1]);
  }
}

void SyntheticSegmentationDataset::get(int64_t index, float* image_out, int64_t* mask_out) const {
  OOMLAB_CHECK(index >= 0 && index < size_, name(), ": sample index ", index, " out of range [0, ", size_, ")");
  const int64_t C = shape_[0], H = shape_[1], W = shape_[2];
  const uint64_t stream = uint64_t(index);   // Philox stream of the sample (Generator::stream_block)
  std::fill(mask_out, mask_out + H * W, int64_t(0));
  const int64_t shapes = 1 + int64_t(Generator::stream_block(seed_, stream, 0)[0] % uint64_t(max_shapes_));
  for (int64_t s = 0; s < shapes; ++s) {
    auto b = Generator::stream_block(seed_, stream, 1 + uint64_t(s));
    const int64_t cls = 1 + int64_t(b[0] % uint64_t(num_classes_ - 1));
    const bool disc = (b[0] >> 16) & 1u;
    const float cy = unit(b[1]) * float(H), cx = unit(b[2]) * float(W);
    // Half-extents between 1/8 and 3/8 of the side.
    const float ry = float(H) * (0.125f + 0.25f * unit(b[3])),
                rx = float(W) * (0.125f + 0.25f * unit(b[3] * 2654435761u));
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) {
        const float dy = (float(y) + 0.5f - cy) / ry, dx = (float(x) + 0.5f - cx) / rx;
        const bool in = disc ? dx * dx + dy * dy <= 1.0f : std::fabs(dx) <= 1.0f && std::fabs(dy) <= 1.0f;
        if (in) mask_out[y * W + x] = cls;
      }
  }
  // Noise: normals from blocks 64.., 4 per block.
  const int64_t n = C * H * W;
  for (int64_t i = 0; i < n; i += 4) {
    auto b = Generator::stream_block(seed_, stream, 64 + uint64_t(i / 4));
    float v[4];
    for (int p = 0; p < 2; ++p) {
      float u1 = (float(b[2 * p] >> 8) + 1.0f) * (1.0f / 16777216.0f), u2 = unit(b[2 * p + 1]);
      float r = std::sqrt(-2.0f * std::log(u1)), t = k2Pi * u2;
      v[2 * p] = r * std::cos(t);
      v[2 * p + 1] = r * std::sin(t);
    }
    for (int64_t k = 0; k < 4 && i + k < n; ++k) image_out[i + k] = sigma_ * v[k];
  }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) {
        const int64_t k = mask_out[y * W + x];
        const float stripe =
            0.5f * std::cos(k2Pi * (freq_[size_t(2 * k)] * float(x) + freq_[size_t(2 * k + 1)] * float(y)));
        image_out[(c * H + y) * W + x] += level_[size_t(k * C + c)] + stripe;
      }
}

std::string SyntheticSegmentationDataset::name() const {
  return str_cat("synthetic-seg(", shape_[0], "x", shape_[1], "x", shape_[2], ", n=", size_, ", classes=",
                 num_classes_, ")");
}

}  // namespace oomlab
