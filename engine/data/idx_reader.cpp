// idx_reader.cpp — IDX parsing over zlib's gz* API (which also reads uncompressed files)
// and the Fashion-MNIST directory search. See idx_reader.h for the validation contract.
#include "engine/data/idx_reader.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "engine/core/error.h"
#include "engine/io/file_kinds.h"

namespace oomlab {
namespace {

constexpr uint32_t kMagicLabels = 2049;  // 0x00000801: type 0x08, 1 dim
constexpr uint32_t kMagicImages = 2051;  // 0x00000803: type 0x08, 3 dims

std::string hex(uint32_t v, int width) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", width, v);
  return buf;
}

// RAII gzFile that reports errors with the file name.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    const int fd = open_regular_file(path);   // a FIFO or device: an error, never a blocking open
    errno = 0;
    f_ = gzdopen(fd, "rb");
    if (!f_) {
      ::close(fd);
      throw IoError(str_cat(path, ": cannot open: ", errno ? std::strerror(errno) : "gzdopen failed"));
    }
    gzbuffer(f_, 1 << 17);
  }
  ~GzReader() { if (f_) gzclose(f_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; returns how many were read (< n only at end of data).
  size_t read(void* dst, size_t n, const char* what) {
    size_t got = 0;
    char* p = static_cast<char*>(dst);
    while (got < n) {
      unsigned chunk = unsigned(std::min<size_t>(n - got, size_t(1) << 30));
      int r = gzread(f_, p + got, chunk);
      if (r < 0) {
        int errnum = 0;
        const char* msg = gzerror(f_, &errnum);
        throw IoError(str_cat(path_, ": corrupt gzip stream while reading ", what, " (", msg,
                              ") after ", got, " bytes"));
      }
      if (r == 0) {
        int errnum = Z_OK;
        const char* msg = gzerror(f_, &errnum);
        if (errnum != Z_OK)  // e.g. a download cut short: "unexpected end of file"
          throw IoError(str_cat(path_, ": truncated or corrupt gzip stream while reading ", what, " (", msg,
                                ") after ", got, " of ", n, " bytes"));
        break;
      }
      got += size_t(r);
    }
    return got;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  gzFile f_ = nullptr;
};

uint32_t be32(const uint8_t* b) {
  return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | uint32_t(b[3]);
}

// Reads magic + dims, validating the magic against `expect_magic`; returns the dims.
std::vector<int64_t> read_header(GzReader& in, uint32_t expect_magic, const char* kind) {
  const std::string& path = in.path();
  uint8_t m[4];
  size_t got = in.read(m, 4, "magic");
  OOMLAB_CHECK_T(IoError, got == 4, path, ": truncated header: expected a 4-byte magic number, got ",
                 got, " bytes");
  uint32_t magic = be32(m);
  const int expect_ndims = int(expect_magic & 0xff);
  OOMLAB_CHECK_T(IoError, m[0] == 0 && m[1] == 0, path, ": bad magic number ", hex(magic, 8),
                 ": expected ", expect_magic, " (", hex(expect_magic, 8), ") for an IDX ", kind, " file");
  OOMLAB_CHECK_T(IoError, m[2] == 0x08, path, ": wrong type byte ", hex(m[2], 2),
                 " in the magic number: expected 0x08 (unsigned byte)");
  OOMLAB_CHECK_T(IoError, m[3] == expect_ndims, path, ": wrong ndims ", int(m[3]),
                 " in the magic number: expected ", expect_ndims, " for an IDX ", kind, " file (magic ",
                 expect_magic, ")");
  std::vector<int64_t> dims(static_cast<size_t>(expect_ndims));
  for (int d = 0; d < expect_ndims; ++d) {
    uint8_t b[4];
    got = in.read(b, 4, "dimensions");
    OOMLAB_CHECK_T(IoError, got == 4, path, ": truncated header: missing dimension ", d, " of ",
                   expect_ndims);
    dims[size_t(d)] = int64_t(be32(b));
  }
  return dims;
}

// Reads exactly `n` payload bytes and checks that nothing follows them.
std::vector<uint8_t> read_payload(GzReader& in, uint64_t n, const char* what) {
  std::vector<uint8_t> data;
  // Grow in chunks so a corrupt header claiming terabytes fails as "truncated", not bad_alloc.
  const uint64_t chunk = uint64_t(16) << 20;
  uint64_t got = 0;
  while (got < n) {
    uint64_t want = std::min(chunk, n - got);
    data.resize(size_t(got + want));
    size_t r = in.read(data.data() + got, size_t(want), what);
    got += r;
    if (r < want) break;
  }
  data.resize(size_t(got));
  OOMLAB_CHECK_T(IoError, got == n, in.path(), ": truncated ", what, ": expected ", n, " bytes, got ", got);
  uint8_t extra[64];
  size_t tail = in.read(extra, sizeof extra, "trailing data");
  OOMLAB_CHECK_T(IoError, tail == 0, in.path(), ": trailing garbage after the ", n, " bytes of ", what,
                 " (the header's sizes do not match the file)");
  return data;
}

bool file_exists(const std::string& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

}  // namespace

IdxImages read_idx_images(const std::string& path, int64_t expect_rows, int64_t expect_cols) {
  GzReader in(path);
  std::vector<int64_t> dims = read_header(in, kMagicImages, "image");
  IdxImages out;
  out.count = dims[0]; out.rows = dims[1]; out.cols = dims[2];
  OOMLAB_CHECK_T(IoError,
                 (expect_rows <= 0 || out.rows == expect_rows) && (expect_cols <= 0 || out.cols == expect_cols), path,
                 ": wrong image size ", out.rows, "x", out.cols, ": expected ", expect_rows, "x", expect_cols);
  // Each dimension is < 2^32, so rows*cols fits 64 bits but count*rows*cols may not (any size
  // is accepted when expect_rows/cols are 0): a wrapped product would pass as a small size.
  const uint64_t per_image = uint64_t(out.rows) * uint64_t(out.cols);
  OOMLAB_CHECK_T(IoError, per_image == 0 || uint64_t(out.count) <= UINT64_MAX / per_image, path,
                 ": header sizes overflow: ", out.count, " images of ", out.rows, "x", out.cols, " bytes");
  uint64_t n = uint64_t(out.count) * per_image;
  out.pixels = read_payload(in, n, "image data");
  return out;
}

std::vector<uint8_t> read_idx_labels(const std::string& path, int64_t num_classes) {
  GzReader in(path);
  std::vector<int64_t> dims = read_header(in, kMagicLabels, "label");
  std::vector<uint8_t> labels = read_payload(in, uint64_t(dims[0]), "label data");
  for (size_t i = 0; i < labels.size(); ++i)
    OOMLAB_CHECK_T(IoError, int64_t(labels[i]) < num_classes, path, ": label value ", int(labels[i]),
                   " at index ", i, " is out of range (expected < ", num_classes, ")");
  return labels;
}

IdxPair read_idx_pair(const std::string& images_path, const std::string& labels_path, int64_t num_classes) {
  IdxPair p;
  p.images = read_idx_images(images_path);
  p.labels = read_idx_labels(labels_path, num_classes);
  OOMLAB_CHECK_T(IoError, p.images.count == int64_t(p.labels.size()), "image/label count mismatch: ",
                 images_path, " has ", p.images.count, " images but ", labels_path, " has ",
                 p.labels.size(), " labels");
  return p;
}

std::string fashion_mnist_file(const std::string& dir, bool train, bool images) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string kind = images ? "images" : "labels";
  const std::string idx = images ? "idx3-ubyte" : "idx1-ubyte";
  const std::string stems[] = {prefix + "-" + kind + "-" + idx, prefix + "-" + kind + "." + idx};
  for (const char* ext : {".gz", ""})
    for (const std::string& stem : stems) {
      std::string p = (std::filesystem::path(dir) / (stem + ext)).string();
      if (file_exists(p)) return p;
    }
  return "";
}

std::vector<std::string> fashion_mnist_files(const std::string& dir) {
  std::vector<std::string> out;
  for (bool train : {true, false})
    for (bool images : {true, false})
      if (std::string p = fashion_mnist_file(dir, train, images); !p.empty()) out.push_back(std::move(p));
  return out;
}

std::string find_fashion_mnist_dir(const std::string& override_dir) {
  std::string dir, source;
  if (!override_dir.empty()) {
    dir = override_dir; source = "the folder given";
  } else if (const char* env = std::getenv(kFashionMnistEnvVar); env && *env) {
    dir = env; source = kFashionMnistEnvVar;
  } else {
    dir = kFashionMnistDebianDir; source = "the default location";
  }
  std::string missing;
  for (bool train : {true, false})
    for (bool images : {true, false})
      if (fashion_mnist_file(dir, train, images).empty())
        missing += str_cat(missing.empty() ? "" : ", ", train ? "train" : "t10k", "-",
                           images ? "images-idx3" : "labels-idx1", "-ubyte.gz");
  OOMLAB_CHECK_T(IoError, missing.empty(), "Fashion-MNIST not found in ", dir, " (", source, "): missing ",
                 missing, "; install the Debian package dataset-fashion-mnist "
                 "(apt-get install dataset-fashion-mnist) or give the folder that holds them");
  return dir;
}

}  // namespace oomlab
