// device.cpp — device parsing and names.
#include "engine/core/device.h"
#include "engine/core/error.h"
#include <cstdlib>

namespace oomlab {

const char* device_type_name(DeviceType t) {
  switch (t) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::meta: return "meta";
    case DeviceType::cuda: return "cuda";
  }
  return "?";
}

std::string Device::str() const {
  if (type == DeviceType::cuda) return "cuda:" + std::to_string(index);
  return device_type_name(type);
}

Device parse_device(std::string_view s) {
  if (s == "cpu") return cpu_device();
  if (s == "meta") return meta_device();
  if (s == "cuda") return {DeviceType::cuda, 0};
  if (s.substr(0, 5) == "cuda:" && s.size() > 5) {
    std::string idx(s.substr(5));
    char* end = nullptr;
    long v = std::strtol(idx.c_str(), &end, 10);
    if (*end == '\0' && v >= 0 && v < 64) return {DeviceType::cuda, int(v)};
  }
  throw DeviceError("unknown device '" + std::string(s) + "' (expected cpu, meta, cuda or cuda:N)");
}

}  // namespace oomlab
