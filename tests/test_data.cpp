// test_data.cpp — IDX reader (good files and every corruption, on tiny gz files made here
// with zlib), the Fashion-MNIST directory search, the real dataset when installed, the
// synthetic datasets' determinism/learnability (and no repeats past 2^32 samples), and the
// DataLoader (shuffle, coverage, drop_last, resume, prefetch errors, shutdown).
// ctest tier: unit
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "engine/core/error.h"
#include "engine/data/dataloader.h"
#include "engine/data/dataset.h"
#include "engine/data/idx_reader.h"
#include "engine/data/synthetic_seg.h"
#include "engine/data/synthetic_seq.h"
#include "engine/core/rng.h"
#include "tests/temp_dir_util.h"

namespace fs = std::filesystem;
using namespace oomlab;

namespace {

void put_be32(std::string& s, uint32_t v) {
  for (int sh = 24; sh >= 0; sh -= 8) s.push_back(char((v >> sh) & 0xff));
}

std::string idx_images(uint32_t count, uint32_t rows, uint32_t cols, uint32_t magic = 2051, int64_t data_len = -1) {
  std::string s;
  put_be32(s, magic); put_be32(s, count); put_be32(s, rows); put_be32(s, cols);
  size_t n = data_len >= 0 ? size_t(data_len) : size_t(count) * rows * cols;
  for (size_t i = 0; i < n; ++i) s.push_back(char((i * 7 + i / 784) & 0xff));
  return s;
}

std::string idx_labels(const std::vector<uint8_t>& labels, uint32_t magic = 2049) {
  std::string s;
  put_be32(s, magic); put_be32(s, uint32_t(labels.size()));
  s.append(labels.begin(), labels.end());
  return s;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
  gzclose(f);
}

void write_plain(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Expects an IoError whose message contains the file name and every given fragment.
template <class F>
void expect_io_error(F&& f, const std::string& file, std::initializer_list<std::string> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected IoError mentioning " << file;
  } catch (const IoError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    for (const auto& fr : fragments) EXPECT_NE(msg.find(fr), std::string::npos) << "missing '" << fr << "' in: " << msg;
  }
}

// A fake Fashion-MNIST directory with `n` samples per split.
void make_fake_fashion(const TempDir& d, uint32_t n, bool dotted_names = false) {
  std::vector<uint8_t> labels(n);
  for (uint32_t i = 0; i < n; ++i) labels[i] = uint8_t(i % 10);
  for (const char* split : {"train", "t10k"}) {
    std::string sep = dotted_names ? "." : "-";
    write_gz(d.file(std::string(split) + "-images" + sep + "idx3-ubyte.gz"), idx_images(n, 28, 28));
    write_gz(d.file(std::string(split) + "-labels" + sep + "idx1-ubyte.gz"), idx_labels(labels));
  }
}

}  // namespace

// ---- IDX reader --------------------------------------------------------------------------

TEST(Idx, RoundTripGzAndPlain) {
  TempDir d;
  std::string img = idx_images(3, 28, 28), lab = idx_labels({7, 0, 9});
  write_gz(d.file("i.gz"), img);
  write_gz(d.file("l.gz"), lab);
  IdxPair p = read_idx_pair(d.file("i.gz"), d.file("l.gz"));
  EXPECT_EQ(p.images.count, 3);
  EXPECT_EQ(p.images.rows, 28);
  EXPECT_EQ(p.images.cols, 28);
  ASSERT_EQ(p.images.pixels.size(), 3u * 784);
  EXPECT_EQ(std::string(p.images.pixels.begin(), p.images.pixels.end()), img.substr(16));
  EXPECT_EQ(p.labels, (std::vector<uint8_t>{7, 0, 9}));
  write_plain(d.file("plain"), img);  // gzread reads uncompressed files too
  EXPECT_EQ(read_idx_images(d.file("plain")).pixels, p.images.pixels);
}

TEST(Idx, EveryCorruptionNamesFileAndField) {
  TempDir d;
  auto img = [&](const std::string& name, const std::string& bytes) {
    write_gz(d.file(name), bytes);
    return [p = d.file(name)] { read_idx_images(p); };
  };
  expect_io_error(img("magic.gz", idx_images(1, 28, 28, 0x12340803)), "magic.gz", {"bad magic number", "2051"});
  expect_io_error(img("type.gz", idx_images(1, 28, 28, 0x00000D03)), "type.gz", {"type byte 0x0d", "0x08"});
  expect_io_error(img("ndims.gz", idx_images(1, 28, 28, 2049)), "ndims.gz", {"ndims 1", "expected 3"});
  expect_io_error(img("size.gz", idx_images(1, 32, 28)), "size.gz", {"image size 32x28", "28x28"});
  expect_io_error(img("t10k-images-idx3-ubyte.gz", idx_images(10000, 28, 28, 2051, 123)),
                  "t10k-images-idx3-ubyte.gz", {"truncated image data: expected 7840000 bytes, got 123"});
  expect_io_error(img("trail.gz", idx_images(1, 28, 28, 2051, 785)), "trail.gz", {"trailing garbage", "image data"});
  expect_io_error(img("hdr.gz", std::string("\0\0\x08", 3)), "hdr.gz", {"truncated header"});
  expect_io_error(img("dims.gz", idx_images(1, 28, 28).substr(0, 10)), "dims.gz", {"truncated header", "dimension"});

  write_gz(d.file("lab_range.gz"), idx_labels({1, 2, 10}));
  expect_io_error([&] { read_idx_labels(d.file("lab_range.gz")); }, "lab_range.gz",
                  {"label value 10 at index 2", "< 10"});
  write_gz(d.file("lab_trunc.gz"), idx_labels({1, 2, 3}).substr(0, 10));
  expect_io_error([&] { read_idx_labels(d.file("lab_trunc.gz")); }, "lab_trunc.gz",
                  {"truncated label data: expected 3 bytes, got 2"});
  write_gz(d.file("lab_magic.gz"), idx_labels({1}, 2051));
  expect_io_error([&] { read_idx_labels(d.file("lab_magic.gz")); }, "lab_magic.gz", {"ndims 3", "expected 1"});

  write_gz(d.file("i2.gz"), idx_images(2, 28, 28));
  write_gz(d.file("l3.gz"), idx_labels({1, 2, 3}));
  expect_io_error([&] { read_idx_pair(d.file("i2.gz"), d.file("l3.gz")); }, "l3.gz",
                  {"count mismatch", "i2.gz", "2 images", "3 labels"});
  expect_io_error([&] { read_idx_images(d.file("nope.gz")); }, "nope.gz", {"cannot read", "No such file"});

  // A gzip stream cut short: an IoError either way (zlib reports it or the data is short).
  std::string gz;
  {
    write_gz(d.file("full.gz"), idx_images(4, 28, 28));
    std::ifstream in(d.file("full.gz"), std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  write_plain(d.file("cut.gz"), gz.substr(0, gz.size() / 2));
  expect_io_error([&] { read_idx_images(d.file("cut.gz")); }, "cut.gz", {});
}

TEST(Idx, DirectorySearch) {
  TempDir empty;
  try {
    find_fashion_mnist_dir(empty.path);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(empty.path), std::string::npos) << msg;
    EXPECT_NE(msg.find("install the Debian package dataset-fashion-mnist (apt-get install "
                       "dataset-fashion-mnist) or give the folder that holds them"), std::string::npos) << msg;
  }
  TempDir fake;
  make_fake_fashion(fake, 5, /*dotted_names=*/true);
  EXPECT_EQ(find_fashion_mnist_dir(fake.path), fake.path);
  const char* old = std::getenv(kFashionMnistEnvVar);
  std::string saved = old ? old : "";
  ::setenv(kFashionMnistEnvVar, fake.path.c_str(), 1);
  EXPECT_EQ(find_fashion_mnist_dir(), fake.path);
  ::setenv(kFashionMnistEnvVar, empty.path.c_str(), 1);
  EXPECT_THROW(find_fashion_mnist_dir(), IoError);
  if (old) ::setenv(kFashionMnistEnvVar, saved.c_str(), 1); else ::unsetenv(kFashionMnistEnvVar);
}

TEST(FashionMnist, FakeDirectoryNormalisation) {
  TempDir d;
  make_fake_fashion(d, 3);
  FashionMnistDataset ds(Split::test, d.path);
  EXPECT_EQ(ds.size(), 3);
  EXPECT_EQ(ds.sample_shape(), (Shape{1, 28, 28}));
  EXPECT_EQ(ds.name(), "fashion-mnist/test");
  std::vector<float> img(784);
  int64_t label = -1;
  ds.get(2, img.data(), &label);
  EXPECT_EQ(label, 2);
  for (int i : {0, 100, 783}) {
    double raw = ds.raw_pixels()[size_t(2 * 784 + i)];
    EXPECT_NEAR(img[size_t(i)], (raw / 255.0 - 0.2860) / 0.3530, 1e-5);
  }
  EXPECT_THROW(ds.get(3, img.data(), &label), ValueError);
}

TEST(FashionMnist, RealDatasetIfInstalled) {
  if (fashion_mnist_file(kFashionMnistDebianDir, true, true).empty())
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FashionMnistDataset train(Split::train, kFashionMnistDebianDir), test(Split::test, kFashionMnistDebianDir);
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 10000);
  std::vector<uint8_t> first_train(train.raw_labels().begin(), train.raw_labels().begin() + 12);
  std::vector<uint8_t> first_test(test.raw_labels().begin(), test.raw_labels().begin() + 12);
  EXPECT_EQ(first_train, (std::vector<uint8_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5, 0, 9}));
  EXPECT_EQ(first_test, (std::vector<uint8_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7, 4, 5}));
  // The normalisation constants are the train set's statistics.
  double sum = 0, sq = 0;
  for (uint8_t p : train.raw_pixels()) { double x = p / 255.0; sum += x; sq += x * x; }
  double n = double(train.raw_pixels().size()), mean = sum / n;
  EXPECT_NEAR(mean, FashionMnistDataset::kMean, 5e-4);
  EXPECT_NEAR(std::sqrt(sq / n - mean * mean), FashionMnistDataset::kStd, 5e-4);
}

// ---- synthetic --------------------------------------------------------------------------

TEST(Synthetic, DeterministicPerSeedAndIndex) {
  SyntheticImageDataset a({3, 8, 8}, 100, 10, 42), b({3, 8, 8}, 100, 10, 42), c({3, 8, 8}, 100, 10, 43);
  std::vector<float> x(192), y(192), z(192);
  int64_t lx, ly, lz;
  b.get(99, y.data(), &ly);  // different access order on b
  b.get(5, y.data(), &ly);
  a.get(5, x.data(), &lx);
  c.get(5, z.data(), &lz);
  EXPECT_EQ(x, y);
  EXPECT_EQ(lx, ly);
  EXPECT_NE(x, z);
  EXPECT_THROW(a.get(100, x.data(), &lx), ValueError);
  EXPECT_THROW(SyntheticImageDataset({3, 8}, 10, 10, 1), ValueError);
}

// One Philox stream per sample: stream i below 2^32 is the old counter base i * 2^32 (so no
// recorded sample changed), and sample i + 2^32 is not sample i again, in every synthetic set.
TEST(Synthetic, SamplesPast2To32DoNotRepeatTheFirstOnes) {
  for (uint64_t i : {uint64_t(0), uint64_t(5), (uint64_t(1) << 32) - 1})
    for (uint64_t b : {uint64_t(0), uint64_t(1), uint64_t(1234567)})
      EXPECT_EQ(Generator::stream_block(42, i, b), Generator::block(42, i << 32, b)) << i << " " << b;
  const int64_t far = int64_t(1) << 32, size = far + 8;
  SyntheticImageDataset image({3, 4, 4}, size, 10, 42);
  std::vector<float> x(48), y(48);
  int64_t lx = 0, ly = 0;
  image.get(5, x.data(), &lx);
  image.get(5 + far, y.data(), &ly);
  EXPECT_NE(x, y);
  SyntheticSeqOptions o;
  o.size = size;
  o.seed = 42;
  SyntheticSequenceDataset seq(o);
  std::vector<int64_t> tx, ty;
  seq.get_tokens(5, tx, &lx);
  seq.get_tokens(5 + far, ty, &ly);
  EXPECT_NE(tx, ty);
  SyntheticSegmentationDataset seg({1, 8, 8}, size, 3, 42);
  std::vector<float> sx(64), sy(64);
  std::vector<int64_t> mx(64), my(64);
  seg.get(5, sx.data(), mx.data());
  seg.get(5 + far, sy.data(), my.data());
  EXPECT_NE(sx, sy);
}

// A prototype table past its byte budget is not built: each sample redraws its class's
// prototype, and the samples are the same floats as the table's.
TEST(Synthetic, PrototypesPastTheTableBudgetAreRedrawnBitIdentically) {
  const Shape chw{3, 5, 7};  // 105 values: the last Philox block is partly used
  SyntheticImageDataset table(chw, 64, 9, 11, true, 0.5f), stream(chw, 64, 9, 11, true, 0.5f, 105 * 4 * 9 - 1);
  std::vector<float> x(105), y(105);
  int64_t lx = -1, ly = -2;
  std::set<int64_t> labels;
  for (int64_t i = 0; i < 64; ++i) {
    table.get(i, x.data(), &lx);
    stream.get(i, y.data(), &ly);
    ASSERT_EQ(lx, ly) << "sample " << i;
    ASSERT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float))) << "sample " << i;
    labels.insert(lx);
  }
  EXPECT_GT(labels.size(), 5u);  // several classes' prototypes were compared
  // A class count whose table could not even be sized is no error when it is not built.
  SyntheticImageDataset huge(chw, 4, int64_t(1) << 62, 11);
  huge.get(3, y.data(), &ly);
  EXPECT_TRUE(ly >= 0 && std::isfinite(y[0]));
}

// Nearest class mean separates the learnable dataset and not the noise one.
static double nearest_mean_accuracy(const Dataset& ds) {
  const int64_t n = ds.sample_numel(), k = ds.num_classes(), train = 300, test = 100;
  std::vector<double> means(size_t(k * n), 0.0);
  std::vector<int64_t> counts(size_t(k), 0);
  std::vector<float> img(static_cast<size_t>(n));
  int64_t label;
  for (int64_t i = 0; i < train; ++i) {
    ds.get(i, img.data(), &label);
    EXPECT_TRUE(label >= 0 && label < k);
    counts[size_t(label)]++;
    for (int64_t j = 0; j < n; ++j) means[size_t(label * n + j)] += img[size_t(j)];
  }
  for (int64_t c = 0; c < k; ++c)
    for (int64_t j = 0; j < n; ++j) means[size_t(c * n + j)] /= std::max<int64_t>(counts[size_t(c)], 1);
  int correct = 0;
  for (int64_t i = train; i < train + test; ++i) {
    ds.get(i, img.data(), &label);
    int64_t best = -1; double best_d = 1e300;
    for (int64_t c = 0; c < k; ++c) {
      double dd = 0;
      for (int64_t j = 0; j < n; ++j) { double t = img[size_t(j)] - means[size_t(c * n + j)]; dd += t * t; }
      if (dd < best_d) { best_d = dd; best = c; }
    }
    correct += best == label;
  }
  return correct / double(test);
}

TEST(Synthetic, LearnableVersusNoise) {
  SyntheticImageDataset learnable({1, 8, 8}, 400, 10, 7, true, 1.0f), noise({1, 8, 8}, 400, 10, 7, false);
  EXPECT_GT(nearest_mean_accuracy(learnable), 0.9);
  EXPECT_LT(nearest_mean_accuracy(noise), 0.4);
}

// ---- DataLoader -------------------------------------------------------------------------

namespace {
// image[0] = index; optional delay and a poisoned index that throws.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t n, int delay_us = 0, int64_t poison = -1)
      : n_(n), delay_us_(delay_us), poison_(poison) {}
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return {1, 1, 2}; }
  int64_t num_classes() const override { return 10; }
  void get(int64_t i, float* img, int64_t* label) const override {
    if (delay_us_) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
    if (i == poison_) throw ValueError("poisoned sample " + std::to_string(i));
    img[0] = float(i); img[1] = -float(i); *label = i % 10;
  }
  std::string name() const override { return "index"; }
 private:
  int64_t n_; int delay_us_; int64_t poison_;
};

std::vector<int64_t> batch_indices(const HostBatch& b) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < b.n; ++i) v.push_back(int64_t(b.images[size_t(2 * i)]));
  return v;
}

std::vector<std::vector<int64_t>> take(DataLoader& dl, int64_t k) {
  std::vector<std::vector<int64_t>> out;
  HostBatch b;
  for (int64_t i = 0; i < k && dl.next(b); ++i) out.push_back(batch_indices(b));
  return out;
}
}  // namespace

TEST(DataLoader, EveryIndexOncePerEpochAndReproducibleShuffle) {
  IndexDataset ds(103);
  for (int prefetch : {0, 2}) {
    DataLoader a(ds, 10, true, false, 1234, prefetch), b(ds, 10, true, false, 1234, 3), c(ds, 10, true, false, 99);
    EXPECT_EQ(a.batches_per_epoch(), 11);
    std::vector<std::vector<int64_t>> epochs;
    for (int e = 0; e < 2; ++e) {
      HostBatch hb;
      std::vector<int64_t> seen;
      int64_t batches = 0;
      while (a.next(hb)) {
        ++batches;
        EXPECT_EQ(hb.shape, (Shape{hb.n, 1, 1, 2}));
        EXPECT_EQ(hb.n, batches == 11 ? 3 : 10);
        for (int64_t i = 0; i < hb.n; ++i) EXPECT_EQ(hb.labels[size_t(i)], int64_t(hb.images[size_t(2 * i)]) % 10);
        auto v = batch_indices(hb);
        seen.insert(seen.end(), v.begin(), v.end());
      }
      EXPECT_EQ(batches, 11);
      EXPECT_EQ(a.epoch(), e + 1);  // moved on after reporting the end
      std::vector<int64_t> sorted = seen;
      std::sort(sorted.begin(), sorted.end());
      for (int64_t i = 0; i < 103; ++i) ASSERT_EQ(sorted[size_t(i)], i);
      EXPECT_EQ(seen, a.epoch_order(e));
      epochs.push_back(seen);
    }
    EXPECT_NE(epochs[0], epochs[1]);       // new permutation per epoch
    b.set_epoch(1);
    std::vector<int64_t> b1;
    for (auto& v : take(b, 100)) b1.insert(b1.end(), v.begin(), v.end());
    EXPECT_EQ(b1, epochs[1]);              // same seed+epoch -> same order
    EXPECT_NE(c.epoch_order(0), epochs[0]);  // other seed -> other order
  }
  DataLoader plain(ds, 50, false, false, 1);
  auto all = take(plain, 10);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0][0], 0);
  EXPECT_EQ(all[2], (std::vector<int64_t>{100, 101, 102}));
}

TEST(DataLoader, DropLastAndImpossibleBatch) {
  IndexDataset ds(10);
  DataLoader keep(ds, 3, false, false, 0), drop(ds, 3, false, true, 0);
  EXPECT_EQ(keep.batches_per_epoch(), 4);
  EXPECT_EQ(drop.batches_per_epoch(), 3);
  auto d = take(drop, 100);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[2], (std::vector<int64_t>{6, 7, 8}));
  DataLoader big(ds, 32, true, false, 0);
  EXPECT_EQ(take(big, 5).at(0).size(), 10u);
  try {
    DataLoader bad(ds, 11, true, true, 0);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("impossible batch"), std::string::npos) << e.what();
  }
  EXPECT_THROW(DataLoader(ds, 0, false, false, 0), ValueError);
}

TEST(DataLoader, StateRestoreGivesIdenticalBatches) {
  IndexDataset ds(57);
  DataLoader a(ds, 8, true, true, 5);
  take(a, 3);
  LoaderState s = a.state();
  EXPECT_EQ(s, (LoaderState{0, 3}));
  auto expected = take(a, 10);  // 4 left in epoch 0 (7 per epoch), then the end
  HostBatch hb;
  std::vector<std::vector<int64_t>> expected_next;
  while (expected_next.size() < 5) { if (a.next(hb)) expected_next.push_back(batch_indices(hb)); }
  for (int prefetch : {0, 1, 4}) {
    DataLoader b(ds, 8, true, true, 5, prefetch);
    take(b, 1);  // in flight elsewhere, then restored
    b.restore(s);
    EXPECT_EQ(take(b, 10), expected);
    std::vector<std::vector<int64_t>> got;
    while (got.size() < 5) { if (b.next(hb)) got.push_back(batch_indices(hb)); }
    EXPECT_EQ(got, expected_next);
  }
  EXPECT_THROW(a.restore({0, 8}), ValueError);
  // Restoring at the end of an epoch reports the end, then continues with the next one.
  DataLoader c(ds, 8, true, true, 5);
  c.restore({2, 7});
  EXPECT_FALSE(c.next(hb));
  EXPECT_EQ(c.state(), (LoaderState{3, 0}));
}

// --workers N: N threads build batches, next() returns them in order: the batches (and so a
// run) are the same for any N, across epochs and after a restore mid-epoch.
TEST(DataLoader, WorkerCountNeverChangesTheBatches) {
  IndexDataset ds(203, /*delay_us=*/20);
  auto batches = [&](int workers) {
    DataLoader dl(ds, 8, true, true, 77, workers);
    std::vector<std::vector<int64_t>> out = take(dl, 30);   // epoch 0: its 25 batches, then the end
    for (auto& v : take(dl, 10)) out.push_back(v);           // epoch 1
    dl.restore({1, 3});
    for (auto& v : take(dl, 5)) out.push_back(v);
    return out;
  };
  const auto ref = batches(0);
  ASSERT_EQ(ref.size(), 40u);
  for (int w : {1, 2, 3, 8}) EXPECT_EQ(batches(w), ref) << w << " workers";
  EXPECT_THROW(DataLoader(ds, 8, true, true, 0, -1), ValueError);
}

TEST(DataLoader, WorkerExceptionIsRethrownInOrder) {
  IndexDataset ds(40, 0, /*poison=*/25);
  DataLoader dl(ds, 10, false, false, 0, 3);
  HostBatch hb;
  EXPECT_TRUE(dl.next(hb));
  EXPECT_TRUE(dl.next(hb));
  try {
    dl.next(hb);
    FAIL() << "expected the worker's ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("poisoned sample 25"), std::string::npos);
  }
  EXPECT_EQ(dl.state(), (LoaderState{0, 2}));
}

TEST(DataLoader, DestructorMidEpochDoesNotHang) {
  IndexDataset slow(100000, /*delay_us=*/200);
  auto t0 = std::chrono::steady_clock::now();
  {
    DataLoader dl(slow, 256, true, false, 0, 4);
    HostBatch hb;
    EXPECT_TRUE(dl.next(hb));
    EXPECT_EQ(hb.n, 256);
  }  // worker is mid-batch here
  {
    DataLoader never_used(slow, 256, true, false, 0, 4);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 2.0);
}
