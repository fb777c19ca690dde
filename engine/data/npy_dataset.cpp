// npy_dataset.cpp — image and token datasets over .npy files (see npy_dataset.h).
#include "engine/data/npy_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/npy.h"

namespace oomlab {
namespace {

std::string split_file(const std::string& dir, const std::string& split, const char* what) {
  return (std::filesystem::path(dir) / (split + "_" + what + ".npy")).string();
}

NpyArray read_required(const std::string& path, const std::string& role) {
  std::error_code ec;   // error_code overloads throughout: an unusable path is an IoError, not filesystem_error
  OOMLAB_CHECK_T(IoError, std::filesystem::exists(path, ec), "npy dataset: ", path, " does not exist (", role, ")");
  return read_npy(path);
}

// "sample 5" for (N,) labels, "sample 5, pixel 17" for (N, H, W) masks.
std::string label_position(const NpyArray& labels, int64_t flat) {
  const int64_t per = labels.shape.empty() ? 1 : labels.numel() / std::max<int64_t>(labels.shape[0], 1);
  return per <= 1 ? str_cat("sample ", flat) : str_cat("sample ", flat / per, ", pixel ", flat % per);
}

void require_integer_labels(const NpyArray& labels) {
  OOMLAB_CHECK(labels.is_integer(), labels.file, ": labels must be integers (got ", npy_type_name(labels.type), ")");
}

void check_labels(const NpyArray& labels, int64_t num_classes) {
  require_integer_labels(labels);
  for (int64_t i = 0, n = labels.numel(); i < n; ++i) {
    const int64_t v = labels.int_at(i);
    OOMLAB_CHECK(v >= 0, labels.file, ": label ", v, " of ", label_position(labels, i),
                 " is negative (class labels are 0..K-1)");
    OOMLAB_CHECK(v < num_classes, labels.file, ": label ", v, " of ", label_position(labels, i), " is outside [0, ",
                 num_classes, ") (the class count given)");
  }
}

// Without --classes the class count is the largest label + 1; past this many classes a
// label is taken for a corrupt one (ImageNet-21k has 21,841 classes), not a head to build.
constexpr int64_t kMaxInferredClasses = int64_t(1) << 20;

int64_t max_label_plus_one(const NpyArray& labels) {
  require_integer_labels(labels);
  int64_t m = -1, at = 0;
  for (int64_t i = 0, n = labels.numel(); i < n; ++i)
    if (labels.int_at(i) > m) m = labels.int_at(i), at = i;
  OOMLAB_CHECK(m < kMaxInferredClasses, labels.file, ": label ", m, " of ", label_position(labels, at), " would make ",
               m + 1, " classes (more than ", kMaxInferredClasses, " is taken for a corrupt label; pass --classes K ",
               "if the model should really have that many)");
  return m + 1;
}

// Float images must be finite: a NaN or Inf pixel would surface only as a diverged loss.
void check_finite_pixels(const NpyArray& x) {
  if (x.type != NpyType::f32 && x.type != NpyType::f64) return;
  const int64_t per = x.numel() / std::max<int64_t>(x.shape[0], 1);
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    const double v = x.type == NpyType::f32 ? double(reinterpret_cast<const float*>(x.data.data())[i])
                                            : reinterpret_cast<const double*>(x.data.data())[i];
    OOMLAB_CHECK(std::isfinite(v), x.file, ": sample ", i / per, " holds a non-finite value (", v, ") at element ",
                 i % per, "; inputs must be finite");
  }
}

class NpyImageDataset final : public Dataset {
 public:
  NpyImageDataset(NpyArray inputs, NpyArray labels, int64_t num_classes, std::string name)
      : x_(std::move(inputs)), y_(std::move(labels)), classes_(num_classes), name_(std::move(name)) {
    OOMLAB_CHECK_T(ShapeError, x_.shape.size() == 4, x_.file, ": image inputs must be (N, C, H, W); got shape ",
                   shape_str(x_.shape), x_.shape.size() == 3 ? " (one channel? save x[:, None])" : "");
    OOMLAB_CHECK(x_.type == NpyType::f32 || x_.type == NpyType::f64 || x_.type == NpyType::u8, x_.file,
                 ": image inputs must be float32, float64 or uint8 (got ", npy_type_name(x_.type), ")");
    const int64_t n = x_.shape[0];
    const bool masks = y_.shape.size() == 3;
    OOMLAB_CHECK_T(ShapeError, y_.shape.size() == 1 || masks, y_.file,
                   ": labels must be (N,) class labels or (N, H, W) masks; got shape ", shape_str(y_.shape));
    OOMLAB_CHECK_T(ShapeError, y_.shape[0] == n, y_.file, " has ", y_.shape[0], " samples, ", x_.file, " has ", n);
    OOMLAB_CHECK_T(ShapeError, !masks || (y_.shape[1] == x_.shape[2] && y_.shape[2] == x_.shape[3]), y_.file,
                   ": masks ", shape_str(y_.shape), " do not match the images' H x W ", x_.shape[2], "x", x_.shape[3]);
    OOMLAB_CHECK(n >= 1, x_.file, " holds no samples");
    check_finite_pixels(x_);
    if (classes_ == 0) classes_ = std::max<int64_t>(max_label_plus_one(y_), 1);
    check_labels(y_, classes_);   // also refuses non-integer labels
  }
  int64_t size() const override { return x_.shape[0]; }
  Shape sample_shape() const override { return {x_.shape[1], x_.shape[2], x_.shape[3]}; }
  int64_t num_classes() const override { return classes_; }
  Shape target_shape() const override {
    return y_.shape.size() == 3 ? Shape{y_.shape[1], y_.shape[2]} : Shape{};
  }
  void get(int64_t index, float* image, int64_t* target) const override {
    OOMLAB_CHECK(index >= 0 && index < size(), name_, ": index ", index, " out of range [0, ", size(), ")");
    const int64_t m = sample_numel(), first = index * m;
    if (x_.type == NpyType::f32) {
      std::memcpy(image, x_.data.data() + size_t(first) * 4, size_t(m) * 4);
    } else if (x_.type == NpyType::u8) {
      const uint8_t* p = x_.data.data() + first;
      for (int64_t k = 0; k < m; ++k) image[k] = float(p[k]) / 255.0f;
    } else {
      for (int64_t k = 0; k < m; ++k) image[k] = float(x_.float_at(first + k));
    }
    const int64_t t = target_numel();
    for (int64_t k = 0; k < t; ++k) target[k] = y_.int_at(index * t + k);
  }
  std::string name() const override { return name_; }

 private:
  NpyArray x_, y_;
  int64_t classes_;
  std::string name_;
};

class NpyTokenDataset final : public Dataset {
 public:
  NpyTokenDataset(NpyArray ids, const NpyArray* mask, NpyArray labels, int64_t num_classes, std::string name)
      : ids_(std::move(ids)), y_(std::move(labels)), classes_(num_classes), name_(std::move(name)) {
    OOMLAB_CHECK_T(ShapeError, ids_.shape.size() == 2, ids_.file, ": token ids must be (N, T); got shape ",
                   shape_str(ids_.shape));
    const int64_t n = ids_.shape[0], t = ids_.shape[1];
    OOMLAB_CHECK(n >= 1 && t >= 1, ids_.file, " holds no tokens (shape ", shape_str(ids_.shape), ")");
    OOMLAB_CHECK_T(ShapeError, y_.shape.size() == 1 && y_.shape[0] == n, y_.file,
                   ": token datasets take one class label per sample, shape (", n, ",); got ", shape_str(y_.shape));
    if (mask) {
      OOMLAB_CHECK_T(ShapeError, mask->shape == ids_.shape, mask->file, ": shape ", shape_str(mask->shape),
                     " differs from the ids' ", shape_str(ids_.shape));
      OOMLAB_CHECK(mask->is_integer(), mask->file, ": the attention mask must be integers or bool (got ",
                   npy_type_name(mask->type), ")");
    }
    lengths_.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      int64_t len = 0;
      bool ended = false;
      for (int64_t j = 0; j < t; ++j) {
        const int64_t id = ids_.int_at(i * t + j);
        const int64_t m = mask ? mask->int_at(i * t + j) : int64_t(id != 0);
        OOMLAB_CHECK(m == 0 || m == 1, mask->file, ": sample ", i, " position ", j, " has mask value ", m,
                     " (0 or 1 expected)");
        if (m == 1) {
          OOMLAB_CHECK(!ended, mask ? mask->file : ids_.file, ": sample ", i, " is not right-padded (position ", j,
                       " is attended after padding); oomlab takes right-padded batches as Hugging Face's tokenizers "
                       "make by default");
          OOMLAB_CHECK(id >= 1, ids_.file, ": sample ", i, " position ", j, " holds id ", id,
                       " inside its attention mask; oomlab reserves id 0 for padding ([PAD]) and ids must be >= 0");
          ++len;
        } else {
          ended = true;
        }
      }
      OOMLAB_CHECK(len >= 1, mask ? mask->file : ids_.file, ": sample ", i, " has no attended token");
      lengths_[size_t(i)] = len;
    }
    if (classes_ == 0) classes_ = std::max<int64_t>(max_label_plus_one(y_), 1);
    check_labels(y_, classes_);   // also refuses non-integer labels
  }
  int64_t size() const override { return ids_.shape[0]; }
  Shape sample_shape() const override { return {ids_.shape[1]}; }
  int64_t num_classes() const override { return classes_; }
  DType input_dtype() const override { return DType::i64; }
  void get(int64_t, float*, int64_t*) const override {
    throw InternalError(name_ + " holds token ids: use get_tokens");
  }
  void get_tokens(int64_t index, std::vector<int64_t>& tokens, int64_t* target) const override {
    OOMLAB_CHECK(index >= 0 && index < size(), name_, ": index ", index, " out of range [0, ", size(), ")");
    const int64_t t = ids_.shape[1], len = lengths_[size_t(index)];
    tokens.resize(size_t(len));
    for (int64_t j = 0; j < len; ++j) tokens[size_t(j)] = ids_.int_at(index * t + j);
    *target = y_.int_at(index);
  }
  std::string name() const override { return name_; }
  void check_token_ids(int64_t vocab) const override {
    const int64_t t = ids_.shape[1];
    for (int64_t i = 0; i < size(); ++i)
      for (int64_t j = 0; j < lengths_[size_t(i)]; ++j) {
        const int64_t id = ids_.int_at(i * t + j);
        OOMLAB_CHECK(id >= 0 && id < vocab, ids_.file, ": token id ", id, " of sample ", i, " at position ", j,
                     " is outside the model's vocabulary [0, ", vocab, ")");
      }
  }

 private:
  NpyArray ids_, y_;
  std::vector<int64_t> lengths_;
  int64_t classes_;
  std::string name_;
};

}  // namespace

std::vector<std::string> npy_dataset_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const char* split : {"train", "test"})
    for (const char* what : {"inputs", "labels"}) out.push_back(split_file(dir, split, what));
  return out;
}

bool npy_split_exists(const std::string& dir, const std::string& split) {
  std::error_code ec;
  return std::filesystem::exists(split_file(dir, split, "inputs"), ec);
}

int64_t npy_label_count(const std::string& dir, const std::string& split) {
  const std::string path = split_file(dir, split, "labels");
  return max_label_plus_one(read_required(path, "labels"));
}

std::shared_ptr<Dataset> load_npy_dataset(const std::string& dir, const std::string& split, int64_t num_classes) {
  std::error_code ec;
  OOMLAB_CHECK_T(IoError, std::filesystem::is_directory(dir, ec), "npy dataset: the folder ", dir,
                 dir.empty() ? "(empty)" : "", " is not a directory");
  NpyArray x = read_required(split_file(dir, split, "inputs"), "inputs");
  NpyArray y = read_required(split_file(dir, split, "labels"), "labels");
  const std::string mask_path = split_file(dir, split, "attention_mask");
  const std::string name = "npy:" + dir + "[" + split + "]";
  // The kind comes from dtype and rank together: (N, T) integers are token ids, (N, C, H, W)
  // arrays are images, whose dtype must then be one an image has.
  OOMLAB_CHECK(!(x.is_integer() && x.type != NpyType::u8 && x.shape.size() == 4), x.file,
               ": (N, C, H, W) images must be ", "float32, float64 or uint8 (got ", npy_type_name(x.type),
               "); integer inputs are read as token ids only ", "when they are (N, T)");
  if (x.is_integer() && x.type != NpyType::u8 && x.type != NpyType::b1) {
    if (std::filesystem::exists(mask_path, ec)) {
      NpyArray m = read_npy(mask_path);
      return std::make_shared<NpyTokenDataset>(std::move(x), &m, std::move(y), num_classes, name);
    }
    return std::make_shared<NpyTokenDataset>(std::move(x), nullptr, std::move(y), num_classes, name);
  }
  OOMLAB_CHECK(!std::filesystem::exists(mask_path, ec), mask_path,
               ": an attention mask goes with token ids (int64 or int32), ", "but ", split_file(dir, split, "inputs"),
               " holds ", npy_type_name(x.type), " images");
  return std::make_shared<NpyImageDataset>(std::move(x), std::move(y), num_classes, name);
}

}  // namespace oomlab
