// cuda_runtime.cpp — the CUDA device runtime: error helpers, the cudaMalloc RawMemory
// behind cuda:i caching allocators, and registration of CUDA kernels into the tables.
// Without a driver or device, allocator_for(cuda:i) throws one clear DeviceError.
#include <cstdlib>
#include <cstring>
#include <memory>

#include "engine/memory/caching_allocator.h"
#include "kernels/cuda/cuda_check.h"

namespace oomlab {
void register_elementwise_cuda_kernels();
void register_copy_cuda_kernels();
void register_dense_cuda_kernels();       // kernels/cuda/register_dense.cpp: cuBLAS, cuDNN, BN, pooling
void register_pointwise_cuda_kernels();   // kernels/cuda/register_pointwise.cpp: own kernels

namespace cuda {
void register_cuda_backend_hooks();   // cuda_backend.cpp: synchronize, properties, numerics options

void throw_cuda_error(cudaError_t err, const char* stmt, const char* file, int line) {
  throw DeviceError(str_cat("CUDA error '", cudaGetErrorString(err), "' (", int(err), ") in ", stmt,
                            " at ", file, ":", line));
}

bool sync_after_launch() {
  static const bool on = [] { const char* v = std::getenv("OOMLAB_CUDA_SYNC"); return v && std::strcmp(v, "0") != 0; }();
  return on;
}

namespace {
class CudaRawMemory final : public RawMemory {
 public:
  explicit CudaRawMemory(int device) : device_(device) {}
  void* alloc(size_t nbytes) override {
    CUDA_CHECK(cudaSetDevice(device_));
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, nbytes);
    if (err == cudaErrorMemoryAllocation) { (void)cudaGetLastError(); return nullptr; }
    if (err != cudaSuccess) throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
    return p;
  }
  void free(void* ptr, size_t) override { cudaSetDevice(device_); cudaFree(ptr); }
  const char* name() const override { return "cuda"; }
  size_t free_bytes() const override {
    size_t free = 0, total = 0;
    if (cudaSetDevice(device_) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) return SIZE_MAX;
    return free;
  }
 private:
  int device_;
};

std::unique_ptr<RawMemory> make_cuda_raw_memory(int device) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw DeviceError(str_cat("--device cuda: no usable CUDA device (", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices",
                              "); use --device cpu or --device meta"));
  }
  if (device >= count)
    throw DeviceError(str_cat("--device cuda:", device, ": only ", count, " CUDA device(s) present"));
  return std::make_unique<CudaRawMemory>(device);
}
}  // namespace
}  // namespace cuda

void register_cuda_kernels() {
  register_raw_memory(DeviceType::cuda, &cuda::make_cuda_raw_memory);
  cuda::register_cuda_backend_hooks();
  register_elementwise_cuda_kernels();
  register_copy_cuda_kernels();
  register_dense_cuda_kernels();
  register_pointwise_cuda_kernels();
}

}  // namespace oomlab
