// cuda_libs.cpp — cuBLAS/cuDNN error messages and the per-(thread, device) handle pool
// (see cuda_libs.h).
#include "kernels/cuda/cuda_libs.h"

#include <cstdlib>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/memory/caching_allocator.h"
#include "kernels/cuda/cuda_stream.h"

namespace oomlab::cuda {

void throw_cublas_error(cublasStatus_t st, const char* stmt, const char* file, int line) {
  throw DeviceError(str_cat("cuBLAS error '", cublasGetStatusString(st), "' (", int(st), ") in ", stmt, " at ",
                            file, ":", line));
}

void throw_cudnn_error(cudnnStatus_t st, const char* stmt, const char* file, int line) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));   // cuDNN 9: the most recent error's details
  throw DeviceError(str_cat("cuDNN error '", cudnnGetErrorString(st), "' (", int(st), ") in ", stmt, " at ",
                            file, ":", line, detail[0] ? ": " : "", detail));
}

void release_cached_segments(int device) { allocator_for(Device{DeviceType::cuda, device}).empty_cache(); }

namespace {
// Free handles per device; leaked on purpose (see header).
template <class H> struct Pool {
  std::mutex mu;
  std::vector<std::vector<H>> free_by_device;
  bool take(int device, H* out) {
    std::lock_guard<std::mutex> lock(mu);
    if (size_t(device) >= free_by_device.size() || free_by_device[size_t(device)].empty()) return false;
    *out = free_by_device[size_t(device)].back();
    free_by_device[size_t(device)].pop_back();
    return true;
  }
  void give(int device, H h) {
    std::lock_guard<std::mutex> lock(mu);
    if (size_t(device) >= free_by_device.size()) free_by_device.resize(size_t(device) + 1);
    free_by_device[size_t(device)].push_back(h);
  }
};
Pool<cublasHandle_t>& blas_pool() { static auto* p = new Pool<cublasHandle_t>; return *p; }
Pool<cudnnHandle_t>& dnn_pool() { static auto* p = new Pool<cudnnHandle_t>; return *p; }

// The handles this thread holds, by device; returned to the pools at thread exit.
struct ThreadHandles {
  std::vector<cublasHandle_t> blas;
  std::vector<cudnnHandle_t> dnn;
  ~ThreadHandles() {
    for (size_t d = 0; d < blas.size(); ++d)
      if (blas[d]) blas_pool().give(int(d), blas[d]);
    for (size_t d = 0; d < dnn.size(); ++d)
      if (dnn[d]) dnn_pool().give(int(d), dnn[d]);
  }
};
thread_local ThreadHandles t_handles;

cublasHandle_t cublas_handle(int device) {
  OOMLAB_ASSERT(device >= 0);
  auto& v = t_handles.blas;
  if (v.size() <= size_t(device)) v.resize(size_t(device) + 1, nullptr);
  cublasHandle_t& h = v[size_t(device)];
  if (!h && !blas_pool().take(device, &h)) {
    cublasHandle_t fresh = nullptr;
    CUBLAS_CHECK(retry_after_release(device, CUBLAS_STATUS_ALLOC_FAILED, [&] { return cublasCreate(&fresh); }));
    h = fresh;
    // The compute type of each call decides TF32 (cuda_settings.h); the handle stays at
    // the default math mode.
    CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    CUBLAS_CHECK(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST));
  }
  CUBLAS_CHECK(cublasSetStream(h, compute_stream(device)));
  return h;
}
}  // namespace

cudnnHandle_t cudnn_handle(int device) {
  OOMLAB_ASSERT(device >= 0);
  auto& v = t_handles.dnn;
  if (v.size() <= size_t(device)) v.resize(size_t(device) + 1, nullptr);
  cudnnHandle_t& h = v[size_t(device)];
  if (!h && !dnn_pool().take(device, &h)) {
    cudnnHandle_t fresh = nullptr;
    CUDNN_CHECK(retry_after_release(device, CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED,
                                    [&] { return cudnnCreate(&fresh); }));
    h = fresh;
  }
  CUDNN_CHECK(cudnnSetStream(h, compute_stream(device)));
  return h;
}

namespace {
// Bytes of a CUBLAS_WORKSPACE_CONFIG value (":SIZE_KiB:COUNT" pairs); -1 when malformed.
int64_t parse_workspace_config(const std::string& v) {
  int64_t total = 0;
  size_t i = 0;
  auto number = [&](int64_t& out) {
    if (i >= v.size() || v[i] != ':') return false;
    size_t j = ++i;
    while (j < v.size() && v[j] >= '0' && v[j] <= '9' && j - i < 9) ++j;
    if (j == i || (j < v.size() && v[j] != ':')) return false;
    out = std::stoll(v.substr(i, j - i));
    i = j;
    return true;
  };
  while (i < v.size()) {
    int64_t kib = 0, count = 0;
    if (!number(kib) || !number(count)) return -1;
    total += kib * 1024 * count;
  }
  return i == 0 ? -1 : total;
}
}  // namespace

size_t cublas_workspace_bytes(int device) {
  static const int64_t configured = [] {
    const char* v = std::getenv("CUBLAS_WORKSPACE_CONFIG");
    if (!v) return int64_t(-2);
    const int64_t bytes = parse_workspace_config(v);
    OOMLAB_CHECK_T(DeviceError, bytes >= 0, "CUBLAS_WORKSPACE_CONFIG='", v,
                   "' is not a list of :SIZE_KiB:COUNT pairs (e.g. :4096:8)");
    return bytes;
  }();
  if (configured >= 0) return size_t(configured);
  int major = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, physical_device(device)));
  return major >= 9 ? size_t(32) << 20 : size_t(4096 * 2 + 16 * 8) * 1024;
}

CublasCall::CublasCall(int device) : h_(cublas_handle(device)), ws_(device, cublas_workspace_bytes(device)) {
  CUBLAS_CHECK(cublasSetWorkspace(h_, ws_.get(), ws_.size()));
}

}  // namespace oomlab::cuda
