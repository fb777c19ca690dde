// dataset.h — image classification datasets: the Dataset interface, Fashion-MNIST (IDX
// files) and a synthetic dataset for benchmarks and CI.
// Contracts:
//  * get(i, image, label) writes sample_numel() floats (C,H,W row-major) and one label; it
//    is const and thread-safe (the DataLoader calls it from its prefetch thread).
//  * Every sample is a pure function of (dataset parameters, index): no hidden state, so
//    access order, shuffling and resume never change what index i returns.
//  * FashionMnistDataset normalises with the train-set statistics: (x/255 - 0.2860)/0.3530.
//  * SyntheticImageDataset(seed) draws sample i from Generator{seed, i * kSampleStride};
//    class prototypes come from a separate stream keyed by a mix of the seed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace oomlab {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape sample_shape() const = 0;      // {C, H, W}
  virtual int64_t num_classes() const = 0;
  virtual void get(int64_t index, float* image_out, int64_t* label_out) const = 0;
  virtual std::string name() const = 0;
  int64_t sample_numel() const { return shape_numel(sample_shape()); }
};

enum class Split { train, test };
const char* split_name(Split s);

class FashionMnistDataset : public Dataset {
 public:
  static constexpr float kMean = 0.2860f, kStd = 0.3530f;
  // data_dir "" searches (env OOMLAB_FASHION_MNIST_DIR, then the Debian location).
  explicit FashionMnistDataset(Split split, const std::string& data_dir = "");

  int64_t size() const override { return count_; }
  Shape sample_shape() const override { return {1, rows_, cols_}; }
  int64_t num_classes() const override { return 10; }
  void get(int64_t index, float* image_out, int64_t* label_out) const override;
  std::string name() const override;

  const std::vector<uint8_t>& raw_pixels() const { return pixels_; }
  const std::vector<uint8_t>& raw_labels() const { return labels_; }
  const std::string& directory() const { return dir_; }

 private:
  Split split_;
  std::string dir_;
  int64_t count_ = 0, rows_ = 0, cols_ = 0;
  std::vector<uint8_t> pixels_, labels_;
};

class SyntheticImageDataset : public Dataset {
 public:
  static constexpr uint64_t kSampleStride = uint64_t(1) << 32;   // Philox blocks per sample
  // learnable: sample = prototype[label] + noise_sigma * N(0,1), prototypes ~ N(0,1);
  // otherwise: pure N(0,1) noise with uniformly random labels.
  SyntheticImageDataset(Shape chw, int64_t size, int64_t num_classes, uint64_t seed,
                        bool learnable = true, float noise_sigma = 0.5f);

  int64_t size() const override { return size_; }
  Shape sample_shape() const override { return shape_; }
  int64_t num_classes() const override { return num_classes_; }
  void get(int64_t index, float* image_out, int64_t* label_out) const override;
  std::string name() const override;

 private:
  Shape shape_;
  int64_t size_, num_classes_;
  uint64_t seed_;
  bool learnable_;
  float sigma_;
  std::vector<float> prototypes_;  // num_classes x numel (learnable only)
};

}  // namespace oomlab
