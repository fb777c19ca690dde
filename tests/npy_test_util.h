// npy_test_util.h — writes .npy files (numpy.lib.format 1.0, as np.save does) for the
// tests of the reader and the npy datasets.
#pragma once
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace npy_test {

// The file's bytes for `descr` (e.g. "<f4"), `shape` "(2, 3)" and raw little-endian data.
inline std::string npy_bytes(const std::string& descr, const std::string& shape, const void* data, size_t nbytes,
                             bool fortran = false, int major = 1) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape + ", }";
  const size_t pre = major == 1 ? 10 : 12;
  while ((pre + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(major);
  out += char(0);
  const uint32_t len = uint32_t(header.size());
  out += char(len & 0xff);
  out += char((len >> 8) & 0xff);
  if (major != 1) {
    out += char((len >> 16) & 0xff);
    out += char((len >> 24) & 0xff);
  }
  out += header;
  out.append(static_cast<const char*>(data), nbytes);
  return out;
}

template <class T>
std::string npy_of(const std::string& descr, const std::string& shape, const std::vector<T>& v) {
  return npy_bytes(descr, shape, v.data(), v.size() * sizeof(T));
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace npy_test
