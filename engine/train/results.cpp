// results.cpp — provenance and memory blocks of results JSON.
#include "engine/train/results.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>

#include "engine/core/backend.h"
#include "engine/core/dispatch.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/kernel_choices.h"
#include "engine/train/version.h"

#include "oomlab_git.h"   // OOMLAB_GIT_SHA, OOMLAB_GIT_DIRTY: written at build time (scripts/git_version.cmake)

namespace oomlab {
namespace {
std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown";
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}
}  // namespace

nlohmann::json results_context(const std::vector<Device>& devices) {
  const Device device = devices.empty() ? cpu_device() : devices[0];
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  nlohmann::json j = {{"oomlab_version", kOomlabVersion},
          {"git_sha", OOMLAB_GIT_SHA},
          {"git_dirty", OOMLAB_GIT_DIRTY != 0},   // tracked files differed from the commit at build time
          {"build_type", OOMLAB_BUILD_TYPE},
          {"compiler", OOMLAB_COMPILER},
          {"blas", "none"},   // set below from the CPU backend's library info
          {"host", host},
          {"cpu", cpu_model()},
          {"num_cpus", int(sysconf(_SC_NPROCESSORS_ONLN))},
          {"device", device.str()},
          {"cuda_compiled", built_with_cuda()},
          {"date", utc_now()}};
  for (auto& [k, v] : library_info()) j[k] = v;   // "blas": "OpenBLAS <version> ..."
  nlohmann::json map = nlohmann::json::array();
  for (const Device& d : devices) map.push_back({{"device", d.str()}, {"physical", physical_device(d)}});
  j["devices"] = std::move(map);
  // Accelerators: name, driver/library versions and the numerics switches in force.
  DeviceProperties props = device_properties(device);
  if (!props.empty()) {
    nlohmann::json d = nlohmann::json::object();
    for (auto& [k, v] : props) d[k] = v;
    j["device_properties"] = std::move(d);
  }
  return j;
}

nlohmann::json memory_stats_json(const Device& device) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : allocator_for(device).stats()) j[k] = v;
  j["capacity_bytes"] = allocator_for(device).capacity();
  return j;
}

nlohmann::json memory_json(const std::vector<Device>& devices, const std::string& of) {
  nlohmann::json per = nlohmann::json::object(), totals = nlohmann::json::object();
  for (const Device& d : devices) {
    nlohmann::json st = memory_stats_json(d);
    for (auto it = st.begin(); it != st.end(); ++it)
      totals[it.key()] = totals.value(it.key(), int64_t(0)) + it.value().get<int64_t>();
    per[d.str()] = std::move(st);
  }
  for (const Device& d : devices)   // one unlimited device makes the total unlimited (0)
    if (per[d.str()]["capacity_bytes"].get<int64_t>() == 0) totals["capacity_bytes"] = 0;
  return {{"of", of}, {"devices", std::move(per)}, {"totals", std::move(totals)}};
}

nlohmann::json make_results(const std::string& command, const std::vector<Device>& devices, nlohmann::json config,
                            nlohmann::json metrics, const std::string& memory_of) {
  return {{"schema_version", kResultsSchemaVersion},
          {"command", command},
          {"context", results_context(devices)},
          {"config", std::move(config)},
          {"metrics", std::move(metrics)},
          {"memory", memory_json(devices, memory_of)},
          {"kernel_choices", kernel_choices_json()}};
}

nlohmann::json summarize_times(std::vector<double> s) {
  if (s.empty()) return {{"median", 0.0}, {"p10", 0.0}, {"p90", 0.0}, {"mean", 0.0}, {"count", 0}};
  std::sort(s.begin(), s.end());
  auto pct = [&](double q) {
    return s[size_t(std::min<double>(double(s.size() - 1), q * double(s.size() - 1) + 0.5))];
  };
  double mean = 0;
  for (double v : s) mean += v;
  return {{"median", pct(0.5)}, {"p10", pct(0.1)}, {"p90", pct(0.9)}, {"mean", mean / double(s.size())},
          {"count", s.size()}};
}

}  // namespace oomlab
