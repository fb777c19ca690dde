// device.h — device identity: cpu, meta (allocation-only, no arithmetic), cuda:i.
// Contract: DeviceType values index kernel tables (kNumDeviceTypes entries).
#pragma once
#include <string>
#include <string_view>

namespace oomlab {

enum class DeviceType : int { cpu = 0, meta = 1, cuda = 2 };
inline constexpr int kNumDeviceTypes = 3;

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  bool is_meta() const { return type == DeviceType::meta; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  std::string str() const;  // "cpu", "meta", "cuda:0"
};

const char* device_type_name(DeviceType t);
Device parse_device(std::string_view s);  // "cpu", "meta", "cuda", "cuda:1"; throws DeviceError

inline Device cpu_device() { return {DeviceType::cpu, 0}; }
inline Device meta_device() { return {DeviceType::meta, 0}; }

}  // namespace oomlab
