// dataset.h — the Dataset interface (image or token inputs; class-label or mask
// targets), Fashion-MNIST (IDX files) and a synthetic image dataset for benchmarks and CI.
// Token and segmentation synthetic datasets live in synthetic_seq.h / synthetic_seg.h;
// SubsetDataset views an index range of another dataset.
// Contracts:
//  * Image datasets (input_dtype() f32): get(i, image, target) writes sample_numel()
//    floats (C,H,W row-major) and target_numel() int64 targets (1 class label, or an
//    [H, W] mask when target_shape() = {H, W}).
//  * Token datasets (input_dtype() i64): get_tokens(i, tokens, target) resizes `tokens`
//    to the sample's length (1..max_len(); may vary per sample; id 0 is padding and never
//    appears inside a sample) and writes target_numel() targets; sample_shape() = {max_len}
//    is the nominal maximum (a dataset may emit rarer, longer samples: see its doc).
//  * get / get_tokens are const and thread-safe (the DataLoader calls them from its
//    prefetch thread).
//  * Every sample is a pure function of (dataset parameters, index): no hidden state, so
//    access order, shuffling and resume never change what index i returns.
//  * FashionMnistDataset normalises with the train-set statistics: (x/255 - 0.2860)/0.3530.
//  * SyntheticImageDataset(seed) draws sample i from Philox stream i of the seed
//    (Generator::stream_block: no two samples alias, however many); class c's prototype
//    from stream c of a key mixed from the seed.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace oomlab {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Shape sample_shape() const = 0;      // {C, H, W} (images) or {max_len} (tokens)
  virtual int64_t num_classes() const = 0;
  // Image inputs: sample_numel() floats and target_numel() targets.
  virtual void get(int64_t index, float* image_out, int64_t* target_out) const = 0;
  virtual std::string name() const = 0;
  virtual DType input_dtype() const { return DType::f32; }   // f32 images | i64 tokens
  virtual Shape target_shape() const { return {}; }          // {} class label | {H, W} mask
  // Token inputs (input_dtype() == i64): the default throws InternalError.
  virtual void get_tokens(int64_t index, std::vector<int64_t>& tokens, int64_t* target_out) const;
  // Token inputs: throws, naming the file, sample and position, when an id is outside
  // [0, vocab) (an embedding would refuse it only when its batch is drawn). Default: no check
  // (datasets that generate their ids within the vocabulary).
  virtual void check_token_ids(int64_t /*vocab*/) const {}
  int64_t sample_numel() const { return shape_numel(sample_shape()); }
  int64_t target_numel() const { return shape_numel(target_shape()); }
  bool is_tokens() const { return input_dtype() == DType::i64; }
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
  // The prototypes are kept in a table while it takes at most this many bytes; past it,
  // each sample redraws its class's prototype from the prototype stream (the same floats,
  // twice the Philox work per sample), so host memory stays flat in num_classes.
  static constexpr int64_t kMaxPrototypeTableBytes = int64_t(1) << 30;
  // learnable: sample = prototype[label] + noise_sigma * N(0,1), prototypes ~ N(0,1);
  // otherwise: pure N(0,1) noise with uniformly random labels.
  SyntheticImageDataset(Shape chw, int64_t size, int64_t num_classes, uint64_t seed, bool learnable = true,
                        float noise_sigma = 0.5f, int64_t max_table_bytes = kMaxPrototypeTableBytes);

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
  std::vector<float> prototypes_;  // num_classes x numel (learnable, within the table budget)
};

// The contiguous index range [begin, begin + size) of another dataset (train/test splits
// of one synthetic pool), named `name`. Holds `base` alive.
class SubsetDataset final : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<Dataset> base, int64_t begin, int64_t size, std::string name);
  int64_t size() const override { return size_; }
  Shape sample_shape() const override { return base_->sample_shape(); }
  int64_t num_classes() const override { return base_->num_classes(); }
  void get(int64_t i, float* img, int64_t* target) const override { base_->get(begin_ + i, img, target); }
  std::string name() const override { return name_; }
  DType input_dtype() const override { return base_->input_dtype(); }
  Shape target_shape() const override { return base_->target_shape(); }
  void get_tokens(int64_t i, std::vector<int64_t>& tokens, int64_t* target) const override {
    base_->get_tokens(begin_ + i, tokens, target);
  }

 private:
  std::shared_ptr<Dataset> base_;
  int64_t begin_, size_;
  std::string name_;
};

}  // namespace oomlab
