// cuda_stream.h — the compute stream of a CUDA device. Today every oomlab CUDA kernel,
// cuBLAS and cuDNN call runs on the legacy default stream (nullptr), which orders all
// work on the device; the caching allocator is stream-unaware and relies on that order
// (a block freed right after a launch can only be reused by later work on the same
// stream). Code that launches work takes its stream from here so that a per-device
// stream can replace this one place later.
#pragma once
#include <cuda_runtime.h>

namespace oomlab::cuda {
inline cudaStream_t compute_stream(int /*device*/) { return nullptr; }
}  // namespace oomlab::cuda
