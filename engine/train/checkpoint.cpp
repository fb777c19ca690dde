// checkpoint.cpp — checkpoint directories written whole, then published atomically, each
// naming the run that wrote it (contracts: checkpoint.h).
#include "engine/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "engine/core/error.h"
#include "engine/core/process.h"
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

std::string crc32_hex(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t off = 0; off < bytes.size();) {   // zlib takes uInt lengths
    const size_t n = std::min<size_t>(bytes.size() - off, size_t(1) << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + off), uInt(n));
    off += n;
  }
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08lx", static_cast<unsigned long>(crc) & 0xffffffffUL);
  return buf;
}

// Moves the complete directory `tmp` to `final_dir`. When final_dir exists, there is no
// moment at which neither the old nor the new checkpoint is complete under a known name:
// the two are exchanged atomically where the filesystem supports it; otherwise the old
// one is renamed aside (.old-step-N-PID, which load_checkpoint falls back to) before the
// new one is renamed in. The old one is deleted afterwards.
void publish_dir(const fs::path& tmp, const fs::path& final_dir, const fs::path& root) {
  std::error_code ec;
  if (!fs::exists(final_dir, ec)) {
    fs::rename(tmp, final_dir, ec);
    OOMLAB_CHECK_T(IoError, !ec, "cannot publish checkpoint ", final_dir.string(), ": ", ec.message());
    fsync_dir(root);
    return;
  }
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    fsync_dir(root);
    fs::remove_all(tmp, ec);   // tmp now holds the replaced checkpoint
    return;
  }
#endif
  const fs::path aside = root / (".old-" + final_dir.filename().string() + "-" + std::to_string(::getpid()));
  fs::remove_all(aside, ec);
  fs::rename(final_dir, aside, ec);
  OOMLAB_CHECK_T(IoError, !ec, "cannot replace checkpoint ", final_dir.string(), ": ", ec.message());
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    std::error_code ec2;
    fs::rename(aside, final_dir, ec2);   // put the old one back
    throw IoError(str_cat("cannot publish checkpoint ", final_dir.string(), ": ", ec.message()));
  }
  fsync_dir(root);
  fs::remove_all(aside, ec);
}

// A checkpoint directory that is missing because a replacement was interrupted between
// its two renames survives as a sibling ".old-<name>-<pid>"; returns it, or `p`.
fs::path recover_replaced(const fs::path& p) {
  std::error_code ec;
  if (fs::exists(p, ec) || !fs::is_directory(p.parent_path().empty() ? "." : p.parent_path(), ec)) return p;
  const std::string prefix = ".old-" + p.filename().string() + "-";
  for (const auto& e : fs::directory_iterator(p.parent_path().empty() ? "." : p.parent_path(), ec))
    if (e.is_directory() && e.path().filename().string().rfind(prefix, 0) == 0) return e.path();
  return p;
}

// Leftovers of runs that died mid-save: ".tmp-step-N-PID" (never published), ".del-step-N-PID"
// (retention's, renamed aside before deletion) and ".old-step-N-PID" whose step-N is back in
// place, when process PID is gone.
void remove_dead_leftovers(const fs::path& root) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    const bool tmp = n.rfind(".tmp-step-", 0) == 0 || n.rfind(".del-step-", 0) == 0,
               old = n.rfind(".old-step-", 0) == 0;
    if (!tmp && !old) continue;
    const size_t dash = n.rfind('-');
    long pid = 0;
    try { pid = std::stol(n.substr(dash + 1)); } catch (...) { continue; }
    if (!process_gone(pid)) continue;
    if (old && !fs::exists(root / n.substr(5, dash - 5), ec)) continue;   // still the only copy of step-N
    fs::remove_all(e.path(), ec);
  }
}

// Retention's delete: renamed aside first, so that no step-N folder is ever half deleted.
void remove_checkpoint_dir(const fs::path& root, const std::string& name) {
  std::error_code ec;
  const fs::path aside = root / (".del-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(aside, ec);
  fs::rename(root / name, aside, ec);
  if (ec) return;   // already gone
  fsync_dir(root);
  fs::remove_all(aside, ec);
}

bool complete_checkpoint(const fs::path& p) {
  std::error_code ec;
  for (const char* f : {"model.safetensors", "trainer_state.safetensors", "trainer_state.json"})
    if (!fs::is_regular_file(p / f, ec)) return false;
  return true;
}

// N of a "step-N" folder name, or -1.
int64_t step_of(const std::string& n) {
  if (n.rfind("step-", 0) != 0 || n.size() == 5 || n.size() > 23 ||
      n.find_first_not_of("0123456789", 5) != std::string::npos)
    return -1;
  return std::stoll(n.substr(5));
}

// The newest complete step-N under `root` newer than `current` (a complete step folder)
// written by the same run: a run killed after publishing it, before `latest` moved.
fs::path newest_of_same_run(const fs::path& root, const fs::path& current) {
  const std::string run = checkpoint_run_id(current.string());
  int64_t best = step_of(current.filename().string());
  if (run.empty() || best < 0) return current;
  fs::path found = current;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t k = step_of(e.path().filename().string());
    if (k > best && checkpoint_run_id(e.path().string()) == run) best = k, found = e.path();
  }
  return found;
}

// Removes a directory on scope exit unless released (a save that failed half-way).
struct RemoveOnFailure {
  fs::path path;
  ~RemoveOnFailure() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};
}  // namespace

std::vector<int64_t> existing_checkpoint_steps(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (const int64_t k = step_of(e.path().filename().string()); k >= 0) steps.push_back(k);
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string checkpoint_run_id(const std::string& step_dir) {
  const fs::path p(step_dir);
  std::error_code ec;
  if (fs::is_symlink(p, ec) || !complete_checkpoint(p)) return "";
  try {
    const nlohmann::json st = nlohmann::json::parse(read_file((p / "trainer_state.json").string()));
    return st.is_object() && st.contains("run_id") && st["run_id"].is_string() ? st["run_id"].get<std::string>() : "";
  } catch (const std::exception&) {   // unreadable or corrupt: no run's (loading names the problem)
    return "";
  }
}

std::string new_run_id() {
  std::random_device rd;
  const uint64_t t = uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  const uint64_t v = (uint64_t(rd()) << 32 ^ rd()) ^ t ^ (uint64_t(::getpid()) << 17);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::vector<std::string> checkpoints_of_run(const std::string& dir, const std::string& run_id, int64_t up_to) {
  std::vector<std::string> out;
  if (run_id.empty()) return out;
  for (int64_t k : existing_checkpoint_steps(dir)) {
    const std::string name = "step-" + std::to_string(k);
    if (k <= up_to && checkpoint_run_id((fs::path(dir) / name).string()) == run_id) out.push_back(name);
  }
  return out;
}

void check_checkpoint_slot_free(const std::string& dir, int64_t step, const std::string& replaceable,
                                const std::string& run_id) {
  const fs::path slot = fs::path(dir) / ("step-" + std::to_string(step));
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(slot, ec))) return;
  if (!replaceable.empty() && fs::equivalent(slot, replaceable, ec)) return;
  if (!run_id.empty() && checkpoint_run_id(slot.string()) == run_id) return;   // this run's, before a restart
  throw IoError(str_cat("cannot save checkpoint ", slot.string(),
                        ": it exists and this run did not write it (a user's ",
                        "folder or another run's checkpoint), and oomlab never replaces one: save to a new directory ",
                        "or move it away"));
}

std::string save_checkpoint(const std::string& dir, int64_t step, const CheckpointData& data,
                            std::vector<std::string>* written, int keep, const std::string& replaceable) {
  fs::path root(dir);
  const std::string step_name = "step-" + std::to_string(step);
  const std::string run_id = data.state.is_object() ? data.state.value("run_id", std::string()) : std::string();
  if (!written || std::find(written->begin(), written->end(), step_name) == written->end())
    check_checkpoint_slot_free(dir, step, replaceable, run_id);
  // Serialise first: a state that cannot be written (a non-finite number) leaves nothing behind.
  const std::string state_json = dump_json_strict(data.state);
  std::error_code ec;
  fs::create_directories(root, ec);
  OOMLAB_CHECK_T(IoError, fs::is_directory(root, ec), "cannot create checkpoint directory ", dir, ": ",
                 ec ? ec.message() : "it is not a directory");
  remove_dead_leftovers(root);
  std::string name = "step-" + std::to_string(step);
  fs::path tmp = root / (".tmp-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  OOMLAB_CHECK_T(IoError, !ec, "cannot create ", tmp.string(), ": ", ec.message());
  RemoveOnFailure guard{tmp};
  write_safetensors((tmp / "model.safetensors").string(), data.model, {{"format", "pt"}});
  write_safetensors((tmp / "trainer_state.safetensors").string(), data.trainer,
                    {{"format", "oomlab"}, {kTrainerStateJsonCrcKey, crc32_hex(state_json)}});
  write_file_atomic((tmp / "trainer_state.json").string(), state_json);
  fsync_dir(tmp);
  fs::path final_dir = root / name;
  publish_dir(tmp, final_dir, root);
  guard.path.clear();
  write_file_atomic((root / "latest").string(), name + "\n");
  // Retention: of the checkpoints this run wrote, keep the newest `keep` (the last is the
  // one `latest` names). Directories it did not write are never touched.
  if (written) {
    written->erase(std::remove(written->begin(), written->end(), name), written->end());
    written->push_back(name);
    while (written->size() > size_t(std::max(keep, 1))) {
      remove_checkpoint_dir(root, written->front());
      written->erase(written->begin());
    }
  }
  return final_dir.string();
}

LoadedCheckpoint load_checkpoint(
    const std::string& path, const NamedTensors& model_targets,
    const std::function<void(const nlohmann::json& state, const std::string& state_file)>& check_state) {
  fs::path p = recover_replaced(fs::path(path));
  std::error_code ec;   // an unusable path is "does not exist", never a filesystem_error
  OOMLAB_CHECK_T(IoError, fs::exists(p, ec), "resume: ", path, " does not exist");
  OOMLAB_CHECK_T(IoError, fs::is_directory(p, ec), "resume: ", path,
                 " is a file, not a checkpoint directory (give the --save directory or one of its step-N)");
  if (fs::exists(p / "latest", ec)) {
    p = newest_of_same_run(p, recover_replaced(p / trim(read_file((p / "latest").string()))));
  } else if (!fs::exists(p / "trainer_state.json", ec)) {
    // A save directory whose first checkpoint was published but not yet named by `latest`
    // (a crash between the two): the newest complete step-N (published only when whole).
    int64_t best = -1;
    fs::path found;
    for (const auto& e : fs::directory_iterator(p, ec)) {
      const int64_t k = step_of(e.path().filename().string());
      if (k > best && e.is_directory(ec) && fs::exists(e.path() / "trainer_state.json", ec)) best = k, found = e.path();
    }
    if (best >= 0) p = found;
  }
  for (const char* f : {"model.safetensors", "trainer_state.safetensors", "trainer_state.json"})
    OOMLAB_CHECK_T(IoError, fs::exists(p / f, ec), "resume: ", (p / f).string(),
                   " is missing (not a complete oomlab checkpoint)");
  LoadedCheckpoint out;
  out.path = p.string();
  const std::string trainer_file = (p / "trainer_state.safetensors").string();
  const std::string state_file = (p / "trainer_state.json").string();
  SafetensorsContents trainer = read_safetensors(trainer_file);
  const std::string state_bytes = read_file(state_file);
  auto crc = trainer.metadata.find(kTrainerStateJsonCrcKey);
  OOMLAB_CHECK_T(IoError, crc != trainer.metadata.end(), trainer_file,
                 ": no CRC32 of trainer_state.json in its metadata (", kTrainerStateJsonCrcKey,
                 "; a checkpoint from an older oomlab?)");
  const std::string actual = crc32_hex(state_bytes);
  OOMLAB_CHECK_T(IoError, crc->second == actual, state_file, ": CRC32 mismatch: ", trainer_file, " records ",
                 crc->second, " but the file hashes to ", actual, " (edited or corrupt)");
  out.trainer = std::move(trainer.tensors);
  try {
    out.state = nlohmann::json::parse(state_bytes);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(str_cat(state_file, ": corrupt JSON: ", e.what()));
  }
  OOMLAB_CHECK_T(IoError, out.state.is_object(), state_file, ": not a JSON object");
  if (check_state) check_state(out.state, state_file);
  load_into((p / "model.safetensors").string(), model_targets, /*strict=*/true);
  return out;
}

}  // namespace oomlab
