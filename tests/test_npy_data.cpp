// test_npy_data.cpp — the .npy reader (engine/io/npy.h) and the npy datasets
// (engine/data/npy_dataset.h): every supported type and both header versions read back
// exactly; every malformed file or inconsistent set of files is a clear error naming the
// file and the problem; the token dataset's lengths follow the attention mask.
// ctest tier: unit
#include <cmath>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "engine/core/error.h"
#include "engine/data/dataloader.h"
#include "engine/data/npy_dataset.h"
#include "engine/io/npy.h"
#include "npy_test_util.h"

namespace fs = std::filesystem;
using namespace oomlab;
using npy_test::npy_bytes;
using npy_test::npy_of;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("oomlab_npy_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void put(const fs::path& dir, const std::string& file, const std::string& bytes) {
  npy_test::write_file((dir / file).string(), bytes);
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Npy, EveryTypeAndBothHeaderVersionsReadBack) {
  const std::vector<float> f = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  NpyArray a = parse_npy(npy_of("<f4", "(2, 3)", f), "a.npy");
  EXPECT_EQ(a.type, NpyType::f32);
  EXPECT_EQ(a.shape, (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a.float_at(i), f[size_t(i)]);

  const std::vector<int64_t> l = {0, 9, -3};
  NpyArray b = parse_npy(npy_bytes("<i8", "(3,)", l.data(), 24, false, 2), "b.npy");
  EXPECT_EQ(b.shape, (Shape{3}));
  EXPECT_EQ(b.int_at(1), 9);
  EXPECT_EQ(b.int_at(2), -3);

  const std::vector<int32_t> i32 = {5, -6};
  EXPECT_EQ(parse_npy(npy_of("<i4", "(2,)", i32), "c.npy").int_at(1), -6);
  const std::vector<uint8_t> u8 = {255, 1, 0, 1};
  NpyArray u = parse_npy(npy_of("|u1", "(2, 2)", u8), "d.npy");
  EXPECT_EQ(u.int_at(0), 255);
  NpyArray bl = parse_npy(npy_of("|b1", "(4,)", u8), "e.npy");
  EXPECT_EQ(bl.int_at(0), 1);   // any non-zero byte is True
  const std::vector<double> d = {0.1, 1e300};
  EXPECT_EQ(parse_npy(npy_of("<f8", "(2,)", d), "f.npy").float_at(1), 1e300);
  const std::vector<float> scalar = {4.0f};
  EXPECT_EQ(parse_npy(npy_of("<f4", "()", scalar), "g.npy").numel(), 1);
  EXPECT_EQ(parse_npy(npy_bytes("<f4", "(0, 3)", nullptr, 0), "h.npy").numel(), 0);
}

struct BadNpy { const char* label; std::string bytes; const char* expected; };

TEST(Npy, MalformedFilesAreIoErrorsNamingFileAndProblem) {
  const std::vector<float> four = {1, 2, 3, 4};
  std::string good = npy_of("<f4", "(4,)", four);
  std::string bad_version = good;
  bad_version[6] = 4;
  std::string long_header = good;
  long_header[8] = char(0xff);
  long_header[9] = char(0x7f);
  const std::vector<BadNpy> cases = {
      {"empty", "", "shorter than the 10-byte preamble"},
      {"magic", "\x93NUMPX" + good.substr(6), "no \\x93NUMPY magic"},
      {"version", bad_version, "format version 4.0"},
      {"header past the end", long_header, "the header claims"},
      {"truncated data", good.substr(0, good.size() - 3), "truncated?"},
      {"extra data", good + "xyz", "the file has 19"},
      {"big-endian", npy_of(">f4", "(4,)", four), "big-endian"},
      {"object", npy_bytes("|O", "(0,)", nullptr, 0), "pickled Python objects"},
      {"complex", npy_bytes("<c8", "(0,)", nullptr, 0), "not supported"},
      {"fortran", npy_bytes("<f4", "(2, 2)", four.data(), 16, true), "np.ascontiguousarray"},
      {"overflowing shape", npy_bytes("<f4", "(4294967296, 4294967296)", nullptr, 0), "overflows"},
      {"dimension too long", npy_bytes("<f4", "(99999999999999999999,)", nullptr, 0), "does not fit in 64 bits"},
      {"negative dimension", npy_bytes("<f4", "(-1,)", nullptr, 0), "expected a dimension"},
  };
  for (const BadNpy& c : cases) {
    const std::string msg = what_of([&] { parse_npy(c.bytes, "x.npy"); });
    EXPECT_NE(msg.find("x.npy"), std::string::npos) << c.label << ": " << msg;
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.label << ": " << msg;
  }
  // Header dicts np.save never writes.
  auto with_header = [](const std::string& h) {
    std::string s = "\x93NUMPY";
    s += char(1);
    s += char(0);
    s += char(h.size() & 0xff);
    s += char(h.size() >> 8);
    return s + h;
  };
  EXPECT_NE(what_of([&] {
              parse_npy(with_header("{'descr': '<f4', 'shape': (0,)}"), "y.npy");
            }).find("lacks 'fortran_order'"),
            std::string::npos);
  EXPECT_NE(what_of([&] {
              parse_npy(with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (0,), 'x': 1}"), "y.npy");
            }).find("unexpected key 'x'"),
            std::string::npos);
  EXPECT_NE(what_of([&] { parse_npy(with_header("{'descr: '<f4'}"), "y.npy"); }).find("header"), std::string::npos);
  EXPECT_NE(what_of([&] { read_npy("/nonexistent/z.npy"); }).find("/nonexistent/z.npy"), std::string::npos);
}

TEST(NpyDataset, ImagesFloatAndUint8WithLabelsOrMasks) {
  fs::path dir = fresh_dir("images");
  std::vector<float> x(2 * 1 * 2 * 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i) - 3.5f;
  put(dir, "train_inputs.npy", npy_of("<f4", "(2, 1, 2, 2)", x));
  put(dir, "train_labels.npy", npy_of("<i8", "(2,)", std::vector<int64_t>{4, 1}));
  auto d = load_npy_dataset(dir.string(), "train");
  EXPECT_EQ(d->size(), 2);
  EXPECT_EQ(d->sample_shape(), (Shape{1, 2, 2}));
  EXPECT_EQ(d->num_classes(), 5);   // inferred: max label + 1
  std::vector<float> img(4);
  int64_t label = -1;
  d->get(1, img.data(), &label);
  EXPECT_EQ(label, 1);
  EXPECT_EQ(img[0], x[4]);
  EXPECT_EQ(img[3], x[7]);
  EXPECT_EQ(load_npy_dataset(dir.string(), "train", 10)->num_classes(), 10);

  // uint8 images are divided by 255 (torchvision's ToTensor); (N, H, W) masks are targets.
  put(dir, "train_inputs.npy", npy_of("|u1", "(2, 1, 2, 2)", std::vector<uint8_t>{0, 255, 51, 102, 1, 2, 3, 4}));
  put(dir, "train_labels.npy", npy_of("|u1", "(2, 2, 2)", std::vector<uint8_t>{0, 1, 2, 1, 0, 0, 0, 2}));
  d = load_npy_dataset(dir.string(), "train");
  EXPECT_EQ(d->target_shape(), (Shape{2, 2}));
  EXPECT_EQ(d->num_classes(), 3);
  std::vector<int64_t> mask(4);
  d->get(0, img.data(), mask.data());
  EXPECT_EQ(img[1], 1.0f);
  EXPECT_FLOAT_EQ(img[2], 0.2f);
  EXPECT_EQ(mask, (std::vector<int64_t>{0, 1, 2, 1}));
  fs::remove_all(dir);
}

TEST(NpyDataset, TokensFollowTheAttentionMaskAndBatchLikePyTorch) {
  fs::path dir = fresh_dir("tokens");
  // Row 0: 3 tokens then padding (ids after the mask are ignored, even non-zero ones).
  put(dir, "train_inputs.npy", npy_of("<i8", "(2, 4)", std::vector<int64_t>{101, 7, 102, 55, 101, 8, 9, 102}));
  put(dir, "train_attention_mask.npy", npy_of("<i8", "(2, 4)", std::vector<int64_t>{1, 1, 1, 0, 1, 1, 1, 1}));
  put(dir, "train_labels.npy", npy_of("<i8", "(2,)", std::vector<int64_t>{1, 0}));
  auto d = load_npy_dataset(dir.string(), "train", 2);
  ASSERT_TRUE(d->is_tokens());
  std::vector<int64_t> t;
  int64_t y = -1;
  d->get_tokens(0, t, &y);
  EXPECT_EQ(t, (std::vector<int64_t>{101, 7, 102}));
  EXPECT_EQ(y, 1);
  DataLoader loader(*d, 2, /*shuffle=*/false, false, 0, 0);
  HostBatch b;
  ASSERT_TRUE(loader.next(b));
  EXPECT_EQ(b.shape, (Shape{2, 4}));
  EXPECT_EQ(b.tokens, (std::vector<int64_t>{101, 7, 102, 0, 101, 8, 9, 102}));

  // Without a mask file the mask is ids != 0.
  fs::remove(dir / "train_attention_mask.npy");
  put(dir, "train_inputs.npy", npy_of("<i4", "(2, 4)", std::vector<int32_t>{5, 6, 0, 0, 5, 0, 0, 0}));
  d = load_npy_dataset(dir.string(), "train");
  d->get_tokens(1, t, &y);
  EXPECT_EQ(t, (std::vector<int64_t>{5}));
  fs::remove_all(dir);
}

struct BadSet { const char* label; std::vector<std::pair<std::string, std::string>> files; const char* expected; };

TEST(NpyDataset, InconsistentFilesAreClearErrors) {
  const auto f4 = [](const char* shape, size_t n) { return npy_of("<f4", shape, std::vector<float>(n, 0.5f)); };
  const auto i8 = [](const char* shape, std::vector<int64_t> v) { return npy_of("<i8", shape, v); };
  const std::vector<BadSet> cases = {
      {"no labels", {{"train_inputs.npy", f4("(2, 1, 2, 2)", 8)}}, "train_labels.npy does not exist"},
      {"rank 3 images",
       {{"train_inputs.npy", f4("(2, 2, 2)", 8)}, {"train_labels.npy", i8("(2,)", {0, 1})}},
       "save x[:, None]"},
      {"N differs",
       {{"train_inputs.npy", f4("(2, 1, 2, 2)", 8)}, {"train_labels.npy", i8("(3,)", {0, 1, 1})}},
       "has 3 samples"},
      {"negative label",
       {{"train_inputs.npy", f4("(2, 1, 2, 2)", 8)}, {"train_labels.npy", i8("(2,)", {0, -1})}},
       "label -1 of sample 1 is negative (class labels are 0..K-1)"},
      {"negative mask pixel",
       {{"train_inputs.npy", f4("(2, 1, 2, 2)", 8)}, {"train_labels.npy", i8("(2, 2, 2)", {0, 0, 0, 0, 0, 0, -3, 0})}},
       "label -3 of sample 1, pixel 2 is negative"},
      {"int64 images",
       {{"train_inputs.npy", i8("(1, 1, 1, 2)", {3, 4})}, {"train_labels.npy", i8("(1,)", {0})}},
       "(N, C, H, W) images must be float32, float64 or uint8 (got int64)"},
      {"a 10^9 label",
       {{"train_inputs.npy", f4("(2, 1, 2, 2)", 8)}, {"train_labels.npy", i8("(2,)", {1000000000, 0})}},
       "label 1000000000 of sample 0 would make 1000000001 classes"},
      {"a NaN pixel",
       {{"train_inputs.npy", npy_of("<f4", "(2, 1, 2, 2)", std::vector<float>{0, 0, 0, 0, 0, NAN, 0, 0})},
        {"train_labels.npy", i8("(2,)", {0, 1})}},
       "sample 1 holds a non-finite value (nan) at element 1"},
      {"an Inf pixel",
       {{"train_inputs.npy", npy_of("<f8", "(1, 1, 1, 2)", std::vector<double>{0, -INFINITY})},
        {"train_labels.npy", i8("(1,)", {0})}},
       "sample 0 holds a non-finite value (-inf) at element 1"},
      {"float labels",
       {{"train_inputs.npy", f4("(2, 1, 2, 2)", 8)}, {"train_labels.npy", f4("(2,)", 2)}},
       "labels must be integers"},
      {"mask size",
       {{"train_inputs.npy", f4("(2, 1, 2, 2)", 8)},
        {"train_labels.npy", i8("(2, 3, 3)", std::vector<int64_t>(18, 0))}},
       "do not match the images"},
      {"mask with images",
       {{"train_inputs.npy", f4("(2, 1, 2, 2)", 8)},
        {"train_labels.npy", i8("(2,)", {0, 1})},
        {"train_attention_mask.npy", i8("(2, 2)", {1, 1, 1, 1})}},
       "goes with token ids"},
      {"padding id inside",
       {{"train_inputs.npy", i8("(1, 3)", {5, 0, 6})},
        {"train_labels.npy", i8("(1,)", {0})},
        {"train_attention_mask.npy", i8("(1, 3)", {1, 1, 1})}},
       "reserves id 0 for padding"},
      {"left padding",
       {{"train_inputs.npy", i8("(1, 3)", {5, 6, 7})},
        {"train_labels.npy", i8("(1,)", {0})},
        {"train_attention_mask.npy", i8("(1, 3)", {0, 1, 1})}},
       "not right-padded"},
      {"mask value",
       {{"train_inputs.npy", i8("(1, 2)", {5, 6})},
        {"train_labels.npy", i8("(1,)", {0})},
        {"train_attention_mask.npy", i8("(1, 2)", {1, 2})}},
       "mask value 2"},
      {"empty row",
       {{"train_inputs.npy", i8("(1, 2)", {0, 0})}, {"train_labels.npy", i8("(1,)", {0})}},
       "no attended token"},
      {"token labels per position",
       {{"train_inputs.npy", i8("(1, 2)", {3, 4})}, {"train_labels.npy", i8("(1, 2)", {0, 1})}},
       "one class label per sample"},
  };
  for (const BadSet& c : cases) {
    fs::path dir = fresh_dir("bad");
    for (const auto& [name, bytes] : c.files) put(dir, name, bytes);
    const std::string msg = what_of([&] { load_npy_dataset(dir.string(), "train"); });
    EXPECT_NE(msg.find(c.expected), std::string::npos) << c.label << ": " << msg;
    fs::remove_all(dir);
  }
  fs::path dir = fresh_dir("classes");
  put(dir, "train_inputs.npy", f4("(2, 1, 2, 2)", 8));
  put(dir, "train_labels.npy", i8("(2,)", {0, 7}));
  EXPECT_NE(what_of([&] {
              load_npy_dataset(dir.string(), "train", 5);
            }).find("label 7 of sample 1 is outside [0, 5) (the class count given)"),
            std::string::npos);
  EXPECT_NE(what_of([&] { load_npy_dataset((dir / "nope").string(), "train"); }).find("is not a directory"),
            std::string::npos);
  fs::remove_all(dir);
}

// An id outside the model's vocabulary is found when the data is loaded (train checks every
// split), naming file, sample and position, not when an embedding meets its batch; padding
// after the attended tokens is not checked (it is never embedded).
TEST(NpyDataset, TokenIdsOutsideTheVocabularyNameSampleAndPosition) {
  const auto i8 = [](const char* shape, std::vector<int64_t> v) { return npy_of("<i8", shape, v); };
  fs::path dir = fresh_dir("vocab");
  put(dir, "train_inputs.npy", i8("(2, 3)", {5, 6, 0, 7, 30522, 0}));
  put(dir, "train_labels.npy", i8("(2,)", {0, 1}));
  auto d = load_npy_dataset(dir.string(), "train");
  EXPECT_NE(what_of([&] { d->check_token_ids(30522); })
                .find("train_inputs.npy: token id 30522 of sample 1 at position 1 "
                      "is outside the model's vocabulary [0, 30522)"),
            std::string::npos);
  EXPECT_EQ(what_of([&] { d->check_token_ids(30523); }), "(no error)");
  fs::remove_all(dir);
}
