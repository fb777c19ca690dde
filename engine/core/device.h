// device.h — logical devices: cpu:N, meta:N (allocation only, no arithmetic), cuda:N, and
// the thread's current device.
// Contracts:
//  * DeviceType values index kernel tables (kNumDeviceTypes entries).
//  * A logical device is (type, index) with 0 <= index < kMaxDeviceIndex; each has its own
//    caching allocator (memory/caching_allocator.h) and generator (rng.h). Several
//    logical devices may share one physical device (cuda:N maps onto a GPU chosen by the
//    CUDA backend; every cpu:N and meta:N share the host).
//  * parse_device accepts "cpu", "meta", "cuda" (index 0) and "cpu:N", "meta:N",
//    "cuda:N"; str() always prints the index ("meta:1"), so names round-trip.
//  * CurrentDeviceGuard: set by kernel dispatch around every kernel call (and by device
//    threads), read by kernels, workspaces and library handles through current_device();
//    never inferred from a data pointer. Thread-local; guards nest.
#pragma once
#include <string>
#include <string_view>

namespace oomlab {

enum class DeviceType : int { cpu = 0, meta = 1, cuda = 2 };
inline constexpr int kNumDeviceTypes = 3;
inline constexpr int kMaxDeviceIndex = 64;

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  bool is_meta() const { return type == DeviceType::meta; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  std::string str() const;  // "cpu:0", "meta:1", "cuda:0"
};

const char* device_type_name(DeviceType t);
Device parse_device(std::string_view s);  // throws DeviceError naming the accepted forms

inline Device cpu_device(int index = 0) { return {DeviceType::cpu, index}; }
inline Device meta_device(int index = 0) { return {DeviceType::meta, index}; }

// The device the calling thread's kernels run on (cpu:0 when no guard is active).
Device current_device();

class CurrentDeviceGuard {
 public:
  explicit CurrentDeviceGuard(Device device);
  ~CurrentDeviceGuard();
  CurrentDeviceGuard(const CurrentDeviceGuard&) = delete;
  CurrentDeviceGuard& operator=(const CurrentDeviceGuard&) = delete;

 private:
  Device previous_;
};

}  // namespace oomlab
