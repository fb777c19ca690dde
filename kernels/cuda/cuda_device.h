// cuda_device.h — logical CUDA devices and small helpers shared by the CUDA kernels.
// Every `int device` in kernels/cuda is a LOGICAL index (cuda:N, what tensors, allocators,
// handles and results name); only DeviceGuard and raw memory turn it into the physical GPU.
//   * physical_device(logical): the GPU a logical device runs on, logical % device count,
//     so several logical devices share one GPU (DeviceError without a usable GPU);
//   * kernel_device(op): the logical device a kernel runs on, read from the thread's
//     current device (set by kernel dispatch: engine/core/device.h), never inferred from
//     a data pointer; DeviceError when the current device is not a cuda device;
//   * DeviceGuard: makes a logical device's GPU current for a scope and restores the
//     previous one; the first guard on a thread always calls cudaSetDevice, so the thread
//     has the GPU's primary context bound before any library call (cuBLAS needs it);
//   * DeviceBuffer: scratch/workspace memory from the logical device's caching allocator
//     (allocator_for(cuda:i).allocate(n, tag), tag "workspace" by default), released in
//     the destructor. Freeing right after enqueueing work is safe because all work runs
//     in order on the device's compute stream (cuda_stream.h).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace oomlab::cuda {

int physical_device(int logical);
int kernel_device(const char* op);

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
