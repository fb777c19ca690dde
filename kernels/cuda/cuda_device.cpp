// cuda_device.cpp — logical -> physical devices, kernel_device, DeviceGuard, DeviceBuffer
// (see cuda_device.h).
#include "kernels/cuda/cuda_device.h"

#include "engine/core/device.h"
#include "engine/memory/caching_allocator.h"
#include "kernels/cuda/cuda_check.h"

namespace oomlab::cuda {

int physical_device(int logical) {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    return n;
  }();
  if (count <= 0) throw DeviceError("no usable CUDA device; use a cpu or meta device");
  OOMLAB_CHECK_T(DeviceError, logical >= 0, "invalid cuda device index ", logical);
  return logical % count;
}

int kernel_device(const char* op) {
  const Device d = current_device();
  OOMLAB_CHECK_T(DeviceError, d.type == DeviceType::cuda, "op '", op, "': a cuda kernel ran with ", d.str(),
                 " as the current device (kernels are launched through their kernel table)");
  return d.index;
}

namespace {
// The GPU this thread last made current with cudaSetDevice (-1: none yet). A new thread's
// cudaGetDevice() answers 0 although no context is bound to it; cuBLAS (which calls the
// driver API) then fails with CUBLAS_STATUS_INTERNAL_ERROR: DataParallel's backward on a
// fresh thread on the H100. So the first guard on a thread always calls cudaSetDevice,
// which binds the device's primary context (CUDA 12+).
thread_local int t_bound = -1;
}  // namespace

DeviceGuard::DeviceGuard(int device) {
  const int physical = physical_device(device);
  int cur = 0;
  CUDA_CHECK(cudaGetDevice(&cur));
  if (cur == physical && t_bound == physical) return;
  CUDA_CHECK(cudaSetDevice(physical));
  if (t_bound >= 0 && cur != physical) prev_ = cur;
  t_bound = physical;
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0 && cudaSetDevice(prev_) == cudaSuccess) t_bound = prev_;   // destructors never throw
}

DeviceBuffer::DeviceBuffer(int device, size_t nbytes, const char* tag) : device_(device), size_(nbytes) {
  if (nbytes > 0) ptr_ = allocator_for(Device{DeviceType::cuda, device}).allocate(nbytes, tag);
}

void DeviceBuffer::release() noexcept {
  if (!ptr_) return;
  try {
    allocator_for(Device{DeviceType::cuda, device_}).free(ptr_);
  } catch (...) {   // the allocator only throws on a bug; never from a destructor
  }
  ptr_ = nullptr;
  size_ = 0;
}

}  // namespace oomlab::cuda
