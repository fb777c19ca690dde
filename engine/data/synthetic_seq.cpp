// synthetic_seq.cpp — the A-before-B token task (see synthetic_seq.h). Random words come
// from Generator::stream_block(seed, index, k), one Philox stream per sample: block 0 decides length and label,
// block 1 the two forced marker positions, blocks 2.. the other positions (two each).
#include "engine/data/synthetic_seq.h"

#include <algorithm>

#include "engine/core/error.h"
#include "engine/core/rng.h"

namespace oomlab {

SyntheticSequenceDataset::SyntheticSequenceDataset(const SyntheticSeqOptions& o) : o_(o) {
  if (o_.min_len == 0) o_.min_len = std::max<int64_t>(3, o_.max_len / 2);
  OOMLAB_CHECK(o_.size >= 0, "synthetic-seq: size must be >= 0, got ", o_.size);
  OOMLAB_CHECK(o_.min_len >= 3 && o_.min_len <= o_.max_len,
               "synthetic-seq: need 3 <= min_len <= max_len (seq_len), got ", o_.min_len, " and ", o_.max_len);
  OOMLAB_CHECK(o_.long_prob >= 0 && o_.long_prob <= 1, "synthetic-seq: long probability must be in [0, 1], got ",
               o_.long_prob);
  OOMLAB_CHECK(o_.long_prob == 0 || o_.long_len >= 3, "synthetic-seq: long sequences need long_len >= 3, got ",
               o_.long_len);
  id_range_ = std::min<int64_t>(o_.vocab_size, 1000);
  OOMLAB_CHECK(id_range_ > kFirstDistractor, "synthetic-seq: vocabulary of ", o_.vocab_size,
               " is too small (needs > ", kFirstDistractor, " ids)");
}

void SyntheticSequenceDataset::get(int64_t, float*, int64_t*) const {
  throw InternalError(str_cat(name(), ": token dataset, use get_tokens()"));
}

void SyntheticSequenceDataset::get_tokens(int64_t index, std::vector<int64_t>& tokens, int64_t* label_out) const {
  OOMLAB_CHECK(index >= 0 && index < o_.size, name(), ": sample index ", index, " out of range [0, ", o_.size, ")");
  const uint64_t stream = uint64_t(index);
  auto b0 = Generator::stream_block(o_.seed, stream, 0);
  int64_t len = o_.min_len + int64_t(b0[0] % uint64_t(o_.max_len - o_.min_len + 1));
  // 2^-32 resolution on the long probability (exact for 0 and 1).
  if (o_.long_prob > 0 && double(b0[1]) < o_.long_prob * 4294967296.0) len = o_.long_len;
  const int64_t label = int64_t(b0[2] & 1u);
  // Halves [1, h) and [h, len), h = 1 + (len-1)/2: every position of the first half is a
  // marker of type "first" with probability 1/4 (at least one: position r1), every
  // position of the second half one of type "second" likewise; first = A iff label == 1.
  // Many markers per half give a strong early signal (per-token "A early" features),
  // which trains much faster than one pair of markers at arbitrary positions.
  auto b1 = Generator::stream_block(o_.seed, stream, 1);
  const int64_t h = 1 + (len - 1) / 2;
  const int64_t r1 = 1 + int64_t(b1[0] % uint64_t(h - 1));
  const int64_t r2 = h + int64_t(b1[1] % uint64_t(len - h));
  const int64_t first = label == 1 ? kMarkerA : kMarkerB, second = label == 1 ? kMarkerB : kMarkerA;
  tokens.resize(size_t(len));
  tokens[0] = kCls;
  const uint64_t n_distractors = uint64_t(id_range_ - kFirstDistractor);
  for (int64_t t = 1; t < len; t += 2) {   // one block per two positions: (marker?, id) pairs
    auto b = Generator::stream_block(o_.seed, stream, 2 + uint64_t(t / 2));
    for (int64_t k = 0; k < 2 && t + k < len; ++k) {
      const int64_t pos = t + k;
      const bool marker = (b[2 * k] & 3u) == 0 || pos == r1 || pos == r2;
      tokens[size_t(pos)] =
          marker ? (pos < h ? first : second) : kFirstDistractor + int64_t(b[2 * k + 1] % n_distractors);
    }
  }
  *label_out = label;
}

std::string SyntheticSequenceDataset::name() const {
  std::string s = str_cat("synthetic-seq(len ", o_.min_len, "..", o_.max_len, ", ids<", id_range_, ", n=", o_.size);
  if (o_.long_prob > 0) s += str_cat(", long ", o_.long_len, " p=", o_.long_prob);
  return s + ")";
}

}  // namespace oomlab
