// backend.cpp — the per-device-type table of accelerator runtime hooks (backend.h).
// A lazy backend (lazy_backend.h) is loaded by the first request for its hooks, except by
// set_backend_options: options set before it loads are kept and applied as it registers.
#include "engine/core/backend.h"

#include <mutex>

#include "engine/core/dispatch.h"
#include "engine/core/error.h"
#include "engine/core/lazy_backend.h"

namespace oomlab {
namespace {
struct HookTable {
  std::mutex mu;
  BackendHooks hooks[kNumDeviceTypes];
  std::vector<std::pair<std::string, std::string>> libraries;
  BackendOptions options;   // every field ever set, for a backend that registers later
};
HookTable& table() { static HookTable* t = new HookTable; return *t; }

BackendHooks registered_hooks(DeviceType type) {
  ensure_kernels_registered();   // backends register their hooks with their kernels
  HookTable& t = table();
  std::lock_guard<std::mutex> lock(t.mu);
  return t.hooks[int(type)];
}

bool accelerator(DeviceType type) { return type != DeviceType::cpu && type != DeviceType::meta; }

BackendHooks hooks_of(DeviceType type) {
  BackendHooks h = registered_hooks(type);
  if (accelerator(type) && h.synchronize == nullptr && !lazy_backend_loaded(type) && ensure_backend_loaded(type))
    h = registered_hooks(type);
  return h;
}

template <class T> void keep_if_set(std::optional<T>& kept, const std::optional<T>& v) {
  if (v) kept = v;
}
}  // namespace

void register_backend_hooks(DeviceType type, const BackendHooks& hooks) {
  BackendOptions earlier;
  {
    HookTable& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    t.hooks[int(type)] = hooks;
    earlier = t.options;
  }
  if (hooks.set_options) hooks.set_options(earlier);   // unset fields keep the backend's defaults
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
  {
    HookTable& t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    keep_if_set(t.options.matmul_allow_tf32, options.matmul_allow_tf32);
    keep_if_set(t.options.cudnn_allow_tf32, options.cudnn_allow_tf32);
    keep_if_set(t.options.cudnn_benchmark, options.cudnn_benchmark);
    keep_if_set(t.options.cudnn_deterministic, options.cudnn_deterministic);
    keep_if_set(t.options.cudnn_workspace_limit, options.cudnn_workspace_limit);
  }
  for (int t = 0; t < kNumDeviceTypes; ++t)   // registered backends only: a lazy one gets them as it registers
    if (auto f = registered_hooks(DeviceType(t)).set_options) f(options);
}

bool parse_switch(const std::string& value, const std::string& what) {
  if (value == "on" || value == "true" || value == "1") return true;
  if (value == "off" || value == "false" || value == "0") return false;
  throw ValueError(str_cat(what, " expects on or off, got '", value, "'"));
}

}  // namespace oomlab
