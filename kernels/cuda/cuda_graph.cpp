// cuda_graph.cpp — the compute streams of cuda_stream.h and the CUDA backend's graph hooks
// (engine/core/backend.h, engine/memory/device_graph.h): capture on the device's own
// stream in thread-local mode (this thread's capture-unsafe calls fail the capture; the
// allocator's cudaMalloc relaxes it, cuda_runtime.cpp), instantiate, replay with
// cudaGraphLaunch on the same stream.
#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_stream.h"

namespace oomlab::cuda {
namespace {
constexpr int kMaxDevices = 256;
std::array<std::atomic<cudaStream_t>, kMaxDevices> g_streams{};   // nullptr: legacy stream
std::mutex g_create_mu;

bool own_streams_from_env() {
  static const bool on = [] {
    const char* v = std::getenv("OOMLAB_CUDA_OWN_STREAM");
    return v != nullptr && *v != '\0' && std::string_view(v) != "0";
  }();
  return on;
}

struct Graph { cudaGraphExec_t exec = nullptr; int device = 0; };

// Streams belong to GPUs: logical devices on one GPU share its stream, as they shared the
// legacy stream (one order per GPU).
int gpu_of(int device) {
  const int gpu = physical_device(device);
  OOMLAB_CHECK(gpu >= 0 && gpu < kMaxDevices, "cuda:", device, " runs on GPU ", gpu, ": at most ", kMaxDevices,
               " GPUs have streams of their own");
  return gpu;
}
}  // namespace

void use_own_compute_stream(int device) {
  const size_t gpu = size_t(gpu_of(device));
  if (g_streams[gpu].load(std::memory_order_acquire) != nullptr) return;
  std::lock_guard<std::mutex> lock(g_create_mu);
  if (g_streams[gpu].load(std::memory_order_relaxed) != nullptr) return;
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreate(&s));   // blocking: ordered with the legacy stream both ways
  g_streams[gpu].store(s, std::memory_order_release);
}

bool uses_own_compute_stream(int device) { return g_streams[size_t(gpu_of(device))].load(std::memory_order_acquire) != nullptr; }

cudaStream_t compute_stream(int device) {
  const size_t gpu = size_t(gpu_of(device));
  cudaStream_t s = g_streams[gpu].load(std::memory_order_acquire);
  if (s == nullptr && own_streams_from_env()) {
    use_own_compute_stream(device);
    s = g_streams[gpu].load(std::memory_order_acquire);
  }
  return s;
}

namespace {
void graph_prepare(int device) { use_own_compute_stream(device); }

void graph_capture_begin(int device) {
  use_own_compute_stream(device);
  DeviceGuard guard(device);
  CUDA_CHECK(cudaStreamBeginCapture(compute_stream(device), cudaStreamCaptureModeThreadLocal));
}

void* graph_capture_end(int device, bool keep) {
  DeviceGuard guard(device);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(compute_stream(device), &graph);
  if (!keep) {   // abandoned (an exception is on its way): no second error on top of it
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    return nullptr;
  }
  CUDA_CHECK(ended);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  CUDA_CHECK(made);
  return new Graph{exec, device};
}

void graph_replay(void* g, int device) {
  auto* graph = static_cast<Graph*>(g);
  OOMLAB_ASSERT(graph != nullptr && graph->device == device);
  DeviceGuard guard(device);
  CUDA_CHECK(cudaGraphLaunch(graph->exec, compute_stream(device)));
}

void graph_destroy(void* g) {
  auto* graph = static_cast<Graph*>(g);
  if (graph == nullptr) return;
  try {
    DeviceGuard guard(graph->device);
    (void)cudaStreamSynchronize(compute_stream(graph->device));   // a replay may still run
    (void)cudaGraphExecDestroy(graph->exec);
  } catch (...) {   // called from a destructor: the graph leaks rather than the process dies
  }
  delete graph;
}
}  // namespace

void add_graph_hooks(BackendHooks& h) {
  h.graph_prepare = &graph_prepare;
  h.graph_capture_begin = &graph_capture_begin;
  h.graph_capture_end = &graph_capture_end;
  h.graph_replay = &graph_replay;
  h.graph_destroy = &graph_destroy;
}
}  // namespace oomlab::cuda
