// checkpoint.cpp — checkpoint directories written whole, then published atomically.
#include "engine/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"

namespace oomlab {
namespace fs = std::filesystem;

namespace {
void fsync_dir(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) { ::fsync(fd); ::close(fd); }
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}
}  // namespace

std::string save_checkpoint(const std::string& dir, int64_t step, const CheckpointData& data, int keep) {
  fs::path root(dir);
  std::error_code ec;
  fs::create_directories(root, ec);
  OOMLAB_CHECK_T(IoError, fs::is_directory(root), "cannot create checkpoint directory ", dir, ": ", ec.message());
  std::string name = "step-" + std::to_string(step);
  fs::path tmp = root / (".tmp-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  write_safetensors((tmp / "model.safetensors").string(), data.model, {{"format", "pt"}});
  write_safetensors((tmp / "trainer_state.safetensors").string(), data.trainer, {{"format", "oomlab"}});
  write_json_atomic((tmp / "trainer_state.json").string(), data.state);
  fsync_dir(tmp);
  fs::path final_dir = root / name;
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  OOMLAB_CHECK_T(IoError, !ec, "cannot publish checkpoint ", final_dir.string(), ": ", ec.message());
  fsync_dir(root);
  write_file_atomic((root / "latest").string(), name + "\n");
  // Retention: keep the newest `keep` step-* directories.
  std::vector<std::pair<int64_t, fs::path>> steps;
  for (const auto& e : fs::directory_iterator(root)) {
    std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step-", 0) == 0) {
      try { steps.push_back({std::stoll(n.substr(5)), e.path()}); } catch (...) {}
    }
  }
  std::sort(steps.begin(), steps.end());
  for (size_t i = 0; i + size_t(keep) < steps.size(); ++i) fs::remove_all(steps[i].second, ec);
  return final_dir.string();
}

LoadedCheckpoint load_checkpoint(const std::string& path, const NamedTensors& model_targets) {
  fs::path p(path);
  OOMLAB_CHECK_T(IoError, fs::exists(p), "--resume: ", path, " does not exist");
  if (fs::exists(p / "latest")) p = p / trim(read_file((p / "latest").string()));
  for (const char* f : {"model.safetensors", "trainer_state.safetensors", "trainer_state.json"})
    OOMLAB_CHECK_T(IoError, fs::exists(p / f), "--resume: ", (p / f).string(), " is missing (not a complete oomlab checkpoint)");
  LoadedCheckpoint out;
  out.path = p.string();
  load_into((p / "model.safetensors").string(), model_targets, /*strict=*/true);
  out.trainer = read_safetensors((p / "trainer_state.safetensors").string()).tensors;
  try {
    out.state = nlohmann::json::parse(read_file((p / "trainer_state.json").string()));
  } catch (const nlohmann::json::exception& e) {
    throw IoError(str_cat((p / "trainer_state.json").string(), ": corrupt JSON: ", e.what()));
  }
  return out;
}

}  // namespace oomlab
