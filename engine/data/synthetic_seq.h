// synthetic_seq.h — a learnable, order-dependent token classification task for the
// sequence models (bert-*), `--dataset synthetic-seq`.
// Each sample is [CLS] followed by distractor ids and markers: the first half holds only
// one marker type and the second half only the other (each position a marker with
// probability 1/4, at least one per half); label = 1 iff the A markers come before the B
// markers. Both classes draw the same bag of tokens, so only position-aware features plus
// attention can solve it (~50/50 classes).
// Contracts:
//  * ids: 0 = padding (never emitted), 1 = [CLS] (position 0), 2 = A, 3 = B, distractors
//    uniform in [4, id_range); id_range = min(vocab_size, 1000) keeps embeddings small.
//  * length uniform in [min_len, max_len] (>= 3); with probability long_prob a sample
//    instead has length long_len (the rare very long sequences of the OOM-skip experiment).
//  * sample i is a pure function of (parameters, seed, i): Philox stream (seed, i * 2^32).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/data/dataset.h"

namespace oomlab {

struct SyntheticSeqOptions {
  int64_t size = 2048;
  int64_t max_len = 32;          // the model's seq_len
  int64_t min_len = 0;           // 0 -> max(3, max_len / 2)
  int64_t vocab_size = 1000;     // ids used: [1, min(vocab_size, 1000))
  double long_prob = 0.0;        // probability of a long sample
  int64_t long_len = 0;          // its length (required when long_prob > 0)
  uint64_t seed = 0;
};

class SyntheticSequenceDataset : public Dataset {
 public:
  static constexpr int64_t kPad = 0, kCls = 1, kMarkerA = 2, kMarkerB = 3, kFirstDistractor = 4;
  explicit SyntheticSequenceDataset(const SyntheticSeqOptions& o);

  int64_t size() const override { return o_.size; }
  Shape sample_shape() const override { return {o_.max_len}; }
  int64_t num_classes() const override { return 2; }
  DType input_dtype() const override { return DType::i64; }
  void get(int64_t index, float* image_out, int64_t* label_out) const override;   // throws
  void get_tokens(int64_t index, std::vector<int64_t>& tokens, int64_t* label_out) const override;
  std::string name() const override;
  const SyntheticSeqOptions& options() const { return o_; }
  int64_t id_range() const { return id_range_; }   // ids are < id_range()

 private:
  SyntheticSeqOptions o_;
  int64_t id_range_;
};

}  // namespace oomlab
