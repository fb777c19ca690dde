// device.cpp — device parsing and names, and the thread's current device.
#include "engine/core/device.h"

#include <cstdlib>

#include "engine/core/error.h"

namespace oomlab {
namespace {
thread_local Device t_current{DeviceType::cpu, 0};
}  // namespace

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::meta: return "meta";
    case DeviceType::cuda: return "cuda";
  }
  return "?";
}

std::string Device::str() const { return std::string(device_type_name(type)) + ":" + std::to_string(index); }

Device parse_device(std::string_view s) {
  for (DeviceType t : {DeviceType::cpu, DeviceType::meta, DeviceType::cuda}) {
    const std::string_view name = device_type_name(t);
    if (s == name) return {t, 0};
    if (s.size() > name.size() + 1 && s.substr(0, name.size()) == name && s[name.size()] == ':') {
      const std::string idx(s.substr(name.size() + 1));
      char* end = nullptr;
      const long v = std::strtol(idx.c_str(), &end, 10);
      if (*end == '\0' && idx[0] >= '0' && idx[0] <= '9' && v >= 0 && v < kMaxDeviceIndex) return {t, int(v)};
    }
  }
  throw DeviceError(str_cat("unknown device '", s,
                            "' (expected cpu, meta or cuda, optionally with an index :N, 0 <= N < ", kMaxDeviceIndex,
                            ")"));
}

Device current_device() { return t_current; }

CurrentDeviceGuard::CurrentDeviceGuard(Device device) : previous_(t_current) { t_current = device; }
CurrentDeviceGuard::~CurrentDeviceGuard() { t_current = previous_; }

}  // namespace oomlab
