// temp_dir_util.h — a test's scratch folder: $TMPDIR/oomlab_<tag>_XXXXXX, made by the
// constructor (std::runtime_error when it cannot be) and removed, with everything in it, by
// the destructor. One helper for every test that writes files.
#pragma once
#include <stdlib.h>

#include <filesystem>
#include <iterator>
#include <stdexcept>
#include <string>
#include <system_error>

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& tag = "test") {
    path = (std::filesystem::temp_directory_path() / ("oomlab_" + tag + "_XXXXXX")).string();
    if (!::mkdtemp(path.data())) throw std::runtime_error("mkdtemp failed for " + path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
  size_t entries() const {
    return size_t(std::distance(std::filesystem::directory_iterator(path), std::filesystem::directory_iterator()));
  }
};
