// cuda_device.cpp — device_of / DeviceGuard / DeviceBuffer (see cuda_device.h).
#include "kernels/cuda/cuda_device.h"

#include "engine/memory/caching_allocator.h"
#include "kernels/cuda/cuda_check.h"

namespace oomlab::cuda {

int device_of(const void* ptr, const char* op) {
  if (!ptr) {
    int cur = 0;
    CUDA_CHECK(cudaGetDevice(&cur));
    return cur;
  }
  cudaPointerAttributes attr{};
  CUDA_CHECK(cudaPointerGetAttributes(&attr, ptr));
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged)
    throw DeviceError(str_cat("op '", op, "': the cuda kernel was given a pointer that is not CUDA device memory"));
  return attr.device;
}

DeviceGuard::DeviceGuard(int device) {
  int cur = 0;
  CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != device) {
    CUDA_CHECK(cudaSetDevice(device));
    prev_ = cur;
  }
}

DeviceGuard::~DeviceGuard() {
  if (prev_ >= 0) (void)cudaSetDevice(prev_);   // destructors never throw
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
