// cuda_runtime.cpp — the CUDA device runtime: error helpers and the cudaMalloc RawMemory
// behind cuda:i caching allocators (make_cuda_raw_memory, registered by the backend's
// registrar in register_cuda.cpp).
// Without a driver or device, allocator_for(cuda:i) throws one clear DeviceError.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "engine/memory/caching_allocator.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/graph_consts.h"

namespace oomlab::cuda {

void throw_cuda_error(cudaError_t err, const char* stmt, const char* file, int line) {
  throw DeviceError(str_cat("CUDA error '", cudaGetErrorString(err), "' (", int(err), ") in ", stmt,
                            " at ", file, ":", line));
}

bool sync_after_launch() {
  static const bool on = [] {
    const char* v = std::getenv("OOMLAB_CUDA_SYNC");
    return v && std::strcmp(v, "0") != 0;
  }();
  return on && const_mode() != ConstMode::record;   // a capture records launches: nothing to wait for
}

namespace {
// Makes `device` current for a scope and restores the previous one, never throwing (free()
// runs from destructors); failures surface through the call made under it.
struct QuietDeviceGuard {
  int prev = -1;
  explicit QuietDeviceGuard(int device) {
    if (cudaGetDevice(&prev) != cudaSuccess || prev == device) {
      (void)cudaGetLastError();
      prev = -1;
    }
    if (prev >= 0) (void)cudaSetDevice(device);
  }
  ~QuietDeviceGuard() { if (prev >= 0) (void)cudaSetDevice(prev); }
};

// The allocator's segments: the calling thread's current device is left as it was.
class CudaRawMemory final : public RawMemory {
 public:
  explicit CudaRawMemory(int device) : device_(device) {}
  void* alloc(size_t nbytes) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    // Under graph capture (device_graph.h) a cudaMalloc is not recorded and the strict
    // capture modes forbid it; the allocator's new segment is fine to make there (its
    // memory outlives every replay), so this thread relaxes the rule around the call, as
    // PyTorch's allocator does.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t err = cudaMalloc(&p, nbytes);
    CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    if (err == cudaErrorMemoryAllocation) { (void)cudaGetLastError(); return nullptr; }
    if (err != cudaSuccess) throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
    return p;
  }
  void free(void* ptr, size_t) override {
    QuietDeviceGuard guard(device_);
    if (cudaError_t e = cudaFree(ptr); e != cudaSuccess) {
      (void)cudaGetLastError();   // not to be blamed on the next kernel launch
      std::fprintf(stderr, "oomlab: cudaFree on cuda:%d failed: %s\n", device_, cudaGetErrorString(e));
    }
  }
  const char* name() const override { return "cuda"; }
  size_t free_bytes() const override {
    size_t free = 0, total = 0;
    QuietDeviceGuard guard(device_);
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) { (void)cudaGetLastError(); return SIZE_MAX; }
    return free;
  }
 private:
  int device_;
};
}  // namespace

std::unique_ptr<RawMemory> make_cuda_raw_memory(int device) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw DeviceError(str_cat("no usable CUDA device (", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices",
                              "); use a cpu or meta device"));
  }
  // Logical device cuda:N allocates on GPU N % count (cuda_device.h): several logical
  // devices may share one GPU, each with its own allocator.
  return std::make_unique<CudaRawMemory>(physical_device(device));
}

}  // namespace oomlab::cuda
