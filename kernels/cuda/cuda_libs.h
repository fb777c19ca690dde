// cuda_libs.h — cuBLAS / cuDNN error checks and per-device library handles.
//   CUBLAS_CHECK(stmt) / CUDNN_CHECK(stmt): a failing status throws oomlab::DeviceError
//   naming the statement, file, line and the library's message (as CUDA_CHECK does).
//   cublas_handle(device) / cudnn_handle(device): a handle for `device`, created lazily
//   and bound to the device's compute stream (cuda_stream.h). The caller must have made
//   `device` current (DeviceGuard). Handles are leased per (host thread, device) from a
//   process-wide pool, since cuBLAS/cuDNN handles must not be used by two threads at
//   once (virtual devices run one thread each); a thread's handles return to the pool
//   when it exits. The pool is never destroyed (no library teardown during exit).
//   retry_after_release(device, alloc_failed, call): for library calls that allocate
//   device memory themselves (handle creation, cuBLAS's workspace pool): when call()
//   returns the library's allocation-failed status, the caching allocator's cached free
//   segments are released (empty_cache) and call() runs once more, as cudaMalloc is
//   retried in CachingAllocator::allocate; the caller checks the returned status.
#pragma once
#include <cublas_v2.h>
#include <cudnn.h>

#include "kernels/cuda/cuda_check.h"

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

cublasHandle_t cublas_handle(int device);
cudnnHandle_t cudnn_handle(int device);
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
