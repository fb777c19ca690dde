// idx_reader.h — strict reader for IDX files (the MNIST / Fashion-MNIST format), gzip or
// plain (zlib's gzread reads both), and the search for the Fashion-MNIST files.
// Contracts:
//  * Every malformed input is an IoError whose message names the file and the field:
//    magic, type byte (must be 0x08 = unsigned byte), ndims (1 labels / 3 images), image
//    size (rows x cols must match), data length (exactly the header's product: truncated
//    data and trailing bytes are both errors), label values (< num_classes), and the image
//    count == label count of a pair.
//  * Search order for the data directory: explicit --data-dir, env OOMLAB_FASHION_MNIST_DIR,
//    then the Debian package location /usr/share/datasets/fashion-mnist.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace oomlab {

inline constexpr const char* kFashionMnistEnvVar = "OOMLAB_FASHION_MNIST_DIR";
inline constexpr const char* kFashionMnistDebianDir = "/usr/share/datasets/fashion-mnist";

struct IdxImages {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // count * rows * cols, row-major
};

// Magic 2051 (0x00000803), dims [count, rows, cols]; rows/cols must equal the expected
// values (pass 0 to accept any).
IdxImages read_idx_images(const std::string& path, int64_t expect_rows = 28, int64_t expect_cols = 28);
// Magic 2049 (0x00000801), dims [count]; every value must be < num_classes.
std::vector<uint8_t> read_idx_labels(const std::string& path, int64_t num_classes = 10);

// Reads both files of a split and checks that their counts agree.
struct IdxPair { IdxImages images; std::vector<uint8_t> labels; };
IdxPair read_idx_pair(const std::string& images_path, const std::string& labels_path,
                      int64_t num_classes = 10);

// The directory holding Fashion-MNIST: `override_dir` if non-empty, else the env variable,
// else the Debian location. Throws IoError naming the directory searched (and how to get
// the data) when the four files are not all there.
std::string find_fashion_mnist_dir(const std::string& override_dir = "");
// Path of one file inside `dir`, accepting the usual spellings
// (train-images-idx3-ubyte.gz, train-images.idx3-ubyte.gz, and the uncompressed forms);
// returns "" when none exists.
std::string fashion_mnist_file(const std::string& dir, bool train, bool images);
// The Fashion-MNIST files of `dir` that exist (0 to 4 paths, in any of the accepted spellings).
std::vector<std::string> fashion_mnist_files(const std::string& dir);

}  // namespace oomlab
