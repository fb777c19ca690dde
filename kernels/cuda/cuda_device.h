// cuda_device.h — small helpers shared by the dense CUDA kernels:
//   * device_of(ptr): the CUDA device owning a device pointer (kernel argument structs
//     carry raw pointers only; the device is read from the pointer itself). A host or
//     unknown pointer raises DeviceError; nullptr yields the current device;
//   * DeviceGuard: makes a device current for a scope and restores the previous one;
//   * DeviceBuffer: scratch/workspace memory from the device's caching allocator
//     (allocator_for(cuda:i).allocate(n, tag), tag "workspace" by default), released in
//     the destructor. Freeing right after enqueueing work is safe because all work runs
//     in order on the device's compute stream (cuda_stream.h).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace oomlab::cuda {

int device_of(const void* ptr, const char* op);

class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
 private:
  int prev_ = -1;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, size_t nbytes, const char* tag = "workspace");
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  size_t size() const { return size_; }
  void release() noexcept;   // frees now (idempotent)
 private:
  int device_ = 0;
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace oomlab::cuda
