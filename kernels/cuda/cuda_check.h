// cuda_check.h — CUDA_CHECK / CUDA_LAUNCH_CHECK: every CUDA runtime call is checked and a
// failure throws oomlab::DeviceError naming the statement, file, line and CUDA's message.
// OOMLAB_CUDA_SYNC=1 in the environment synchronizes after each launch (debug switch).
#pragma once
#include <cuda_runtime.h>

#include "engine/core/error.h"

namespace oomlab::cuda {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* stmt, const char* file, int line);
bool sync_after_launch();   // reads OOMLAB_CUDA_SYNC once; false while this thread captures a graph
}  // namespace oomlab::cuda

#define CUDA_CHECK(stmt)                                                              \
  do {                                                                                \
    cudaError_t err_ = (stmt);                                                        \
    if (err_ != cudaSuccess) ::oomlab::cuda::throw_cuda_error(err_, #stmt, __FILE__, __LINE__); \
  } while (0)

#define CUDA_LAUNCH_CHECK()                                                           \
  do {                                                                                \
    CUDA_CHECK(cudaGetLastError());                                                   \
    if (::oomlab::cuda::sync_after_launch()) CUDA_CHECK(cudaDeviceSynchronize());     \
  } while (0)
