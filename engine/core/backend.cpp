// backend.cpp — the per-device-type table of accelerator runtime hooks (backend.h).
#include "engine/core/backend.h"

#include <mutex>

#include "engine/core/dispatch.h"
#include "engine/core/error.h"

namespace oomlab {
namespace {
struct HookTable {
  std::mutex mu;
  BackendHooks hooks[kNumDeviceTypes];
  std::vector<std::pair<std::string, std::string>> libraries;
};
HookTable& table() { static HookTable* t = new HookTable; return *t; }

BackendHooks hooks_of(DeviceType type) {
  ensure_kernels_registered();   // backends register their hooks with their kernels
  HookTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.hooks[int(type)];
}
}  // namespace

void register_backend_hooks(DeviceType type, const BackendHooks& hooks) {
  HookTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  t.hooks[int(type)] = hooks;
}

BackendHooks backend_hooks(DeviceType type) { return hooks_of(type); }

void register_library_info(const std::string& key, const std::string& value) {
  HookTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  for (auto& [k, v] : t.libraries)
    if (k == key) { v = value; return; }
  t.libraries.emplace_back(key, value);
}

std::vector<std::pair<std::string, std::string>> library_info() {
  ensure_kernels_registered();
  HookTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.libraries;
}

bool copy_host_to_device(const Device& device, void* device_dst, const void* host_src, size_t bytes) {
  if (device.is_cpu() || device.is_meta()) return false;
  auto f = hooks_of(device.type).copy_from_host;
  if (!f) return false;
  if (bytes) f(device_dst, host_src, bytes, device.index);
  return true;
}

void device_synchronize(const Device& device) {
  if (device.is_cpu() || device.is_meta()) return;
  if (auto f = hooks_of(device.type).synchronize) f(device.index);
}

DeviceProperties device_properties(const Device& device) {
  if (device.is_cpu() || device.is_meta()) return {};
  if (auto f = hooks_of(device.type).properties) return f(device.index);
  return {};
}

std::string physical_device(const Device& device) {
  if (device.is_cpu() || device.is_meta()) return "host";
  if (auto f = hooks_of(device.type).physical) return f(device.index);
  return "unknown";
}

void set_backend_options(const BackendOptions& options) {
  for (int t = 0; t < kNumDeviceTypes; ++t)
    if (auto f = hooks_of(DeviceType(t)).set_options) f(options);
}

bool parse_switch(const std::string& value, const std::string& what) {
  if (value == "on" || value == "true" || value == "1") return true;
  if (value == "off" || value == "false" || value == "0") return false;
  throw ValueError(str_cat(what, " expects on or off, got '", value, "'"));
}

}  // namespace oomlab
