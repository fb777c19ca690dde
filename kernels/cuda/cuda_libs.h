// cuda_libs.h — cuBLAS / cuDNN error checks and per-device library handles.
//   CUBLAS_CHECK(stmt) / CUDNN_CHECK(stmt): a failing status throws oomlab::DeviceError
//   naming the statement, file, line and the library's message (as CUDA_CHECK does).
//   cudnn_handle(device) (and CublasCall's cuBLAS handle): a handle for `device`, created lazily
//   and bound to the device's compute stream (cuda_stream.h). The caller must have made
//   `device` current (DeviceGuard). Handles are leased per (host thread, device) from a
//   process-wide pool, since cuBLAS/cuDNN handles must not be used by two threads at
//   once (virtual devices run one thread each); a thread's handles return to the pool
//   when it exits. The pool is never destroyed (no library teardown during exit).
//   CublasCall(device): the handle for one cuBLAS call, bound to the compute stream and to a
//     workspace of cublas_workspace_bytes(device) from the device's caching allocator (tag
//     "workspace": counted in workspace_bytes.* and allocated_bytes.*, as PyTorch counts its
//     cuBLAS workspace), freed when the object dies (work is stream-ordered, so the block
//     is reused only by later work). cuBLAS never allocates behind the allocator's back.
//     (cublasSetStream resets a handle to cuBLAS's own pool, so the workspace is set after
//     it on every call.)
//   cublas_workspace_bytes(device): PyTorch's rule: CUBLAS_WORKSPACE_CONFIG (":SIZE_KiB:COUNT"
//     pairs, summed; e.g. ":4096:8" = 32 MiB, ":0:0" = none) or, unset, 32 MiB on compute
//     capability 9 and later (cuBLAS's recommendation for Hopper) and ":4096:2:16:8"
//     (8,519,680 bytes) before; a malformed value is a DeviceError naming it.
//   Handle/stream model: one handle per (host thread, logical device), leased from a pool;
//     every call runs on the logical device's compute stream (today the legacy default
//     stream, shared by all logical devices of a GPU: cuda_stream.h); the thread's first
//     DeviceGuard binds the GPU's context (cuda_device.h).
//   retry_after_release(device, alloc_failed, call): for library calls that allocate
//   device memory themselves (handle creation): when call()
//   returns the library's allocation-failed status, the caching allocator's cached free
//   segments are released (empty_cache) and call() runs once more, as cudaMalloc is
//   retried in CachingAllocator::allocate; the caller checks the returned status.
#pragma once
#include <cublas_v2.h>
#include <cudnn.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"

namespace oomlab::cuda {
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* stmt, const char* file, int line);
[[noreturn]] void throw_cudnn_error(cudnnStatus_t st, const char* stmt, const char* file, int line);

void release_cached_segments(int device);   // allocator_for(cuda:device).empty_cache()

template <class Status, class Call> Status retry_after_release(int device, Status alloc_failed, Call&& call) {
  Status st = call();
  if (st == alloc_failed) {
    release_cached_segments(device);
    st = call();
  }
  return st;
}

cudnnHandle_t cudnn_handle(int device);

size_t cublas_workspace_bytes(int device);
class CublasCall {
 public:
  explicit CublasCall(int device);
  cublasHandle_t handle() const { return h_; }
 private:
  cublasHandle_t h_;
  DeviceBuffer ws_;
};
}  // namespace oomlab::cuda

#define CUBLAS_CHECK(stmt)                                                                   \
  do {                                                                                       \
    cublasStatus_t st_ = (stmt);                                                             \
    if (st_ != CUBLAS_STATUS_SUCCESS) ::oomlab::cuda::throw_cublas_error(st_, #stmt, __FILE__, __LINE__); \
  } while (0)

#define CUDNN_CHECK(stmt)                                                                    \
  do {                                                                                       \
    cudnnStatus_t st_ = (stmt);                                                              \
    if (st_ != CUDNN_STATUS_SUCCESS) ::oomlab::cuda::throw_cudnn_error(st_, #stmt, __FILE__, __LINE__); \
  } while (0)
