// cuda_stream.h — the compute stream of a CUDA device. Every oomlab CUDA kernel, cuBLAS and
// cuDNN call and stream-ordered copy runs on compute_stream(device); the caching allocator
// is stream-unaware and relies on that single order (a block freed right after a launch
// can only be reused by later work on the same stream).
// By default it is the legacy default stream (nullptr), the path every GPU record so far
// measured. A device's own stream (cudaStreamCreate: blocking, so work still queued on the
// legacy stream stays ordered before and after it) replaces it from the moment
// use_own_compute_stream(device) is called — graph capture needs it (the legacy stream
// cannot be captured; device_graph.h) — or for every device with OOMLAB_CUDA_OWN_STREAM=1
// (read once). The switch never goes back within a process.
#pragma once
#include <cuda_runtime.h>

namespace oomlab { struct BackendHooks; }

namespace oomlab::cuda {
cudaStream_t compute_stream(int device);   // device: logical (cuda_device.h)
void use_own_compute_stream(int device);
bool uses_own_compute_stream(int device);
// The graph hooks of BackendHooks (cuda_graph.cpp), for the backend's registration.
void add_graph_hooks(BackendHooks& h);
// The span-timer hooks of BackendHooks (span_timer.cpp: CUDA events on the compute stream).
void add_span_timer_hooks(BackendHooks& h);
}  // namespace oomlab::cuda
