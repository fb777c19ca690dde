// cuda_graph.cpp — the compute streams of cuda_stream.h and the CUDA backend's graph hooks
// (engine/core/backend.h, engine/memory/device_graph.h): capture on the device's own
// stream in thread-local mode (this thread's capture-unsafe calls fail the capture; the
// allocator's cudaMalloc relaxes it, cuda_runtime.cpp), instantiate, replay with
// cudaGraphLaunch on the same stream; and the constant arena of graph_consts.h.
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <vector>

#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/graph_consts.h"

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

bool uses_own_compute_stream(int device) {
  return g_streams[size_t(gpu_of(device))].load(std::memory_order_acquire) != nullptr;
}

cudaStream_t compute_stream(int device) {
  const size_t gpu = size_t(gpu_of(device));
  cudaStream_t s = g_streams[gpu].load(std::memory_order_acquire);
  if (s == nullptr && own_streams_from_env()) {
    use_own_compute_stream(device);
    s = g_streams[gpu].load(std::memory_order_acquire);
  }
  return s;
}

// ---- the constant arena (graph_consts.h) ------------------------------------------------
namespace {
constexpr size_t kSlotAlign = 16;

struct Arena {
  int device = 0;
  void* dev = nullptr;            // `capacity` bytes of device memory (DeviceGraph's block)
  size_t capacity = 0;
  std::vector<char> host;         // the slots' bytes, copied to `dev` at end()
  std::vector<size_t> recorded;   // each slot's size, in record order
  size_t cursor = 0;              // slots filled in the current pass
  const uint64_t* rng_delta = nullptr;   // slot 0's device address (record passes)
  size_t bytes = 0;
};
thread_local ConstMode t_mode = ConstMode::by_value;
thread_local Arena* t_arena = nullptr;

void* consts_begin(int device, void* arena, int mode, void* device_block, size_t bytes, uint64_t rng_delta) {
  auto* a = static_cast<Arena*>(arena);
  if (a == nullptr) {
    OOMLAB_CHECK(device_block != nullptr && bytes > 0, "graph constants: no device block for a new arena");
    a = new Arena;
    a->device = device;
    a->dev = device_block;
    a->capacity = bytes;
    a->host.resize(bytes);
  }
  OOMLAB_CHECK(t_arena == nullptr, "graph constants: a pass is already open on this thread");
  a->cursor = 0;
  a->bytes = 0;
  t_arena = a;
  t_mode = mode == 1 ? ConstMode::record : ConstMode::refresh;
  a->rng_delta = static_cast<const uint64_t*>(next_const_slot(&rng_delta, sizeof rng_delta));   // slot 0
  return a;
}

void consts_end(void* arena) {
  auto* a = static_cast<Arena*>(arena);
  const bool refreshed = t_mode == ConstMode::refresh;
  t_arena = nullptr;
  t_mode = ConstMode::by_value;
  if (a == nullptr) return;
  OOMLAB_CHECK(!refreshed || a->cursor == a->recorded.size(), "graph constants: the optimizer made ", a->cursor,
               " launches before this replay, ", a->recorded.size(), " when the step was captured");
  if (a->bytes == 0) return;
  DeviceGuard guard(a->device);
  CUDA_CHECK(cudaMemcpyAsync(a->dev, a->host.data(), a->bytes, cudaMemcpyHostToDevice, compute_stream(a->device)));
}

void consts_free(void* arena) { delete static_cast<Arena*>(arena); }   // the device block is the caller's
}  // namespace

ConstMode const_mode() { return t_mode; }
const uint64_t* graph_rng_delta() {
  return t_arena != nullptr && t_mode == ConstMode::record ? t_arena->rng_delta : nullptr;
}

const void* next_const_slot(const void* value, size_t bytes) {
  Arena* a = t_arena;
  if (a == nullptr || t_mode == ConstMode::by_value) return nullptr;
  const size_t at = (a->bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
  OOMLAB_CHECK(at + bytes <= a->capacity, "graph constants: the step's optimizer launches need more than ",
               a->capacity, " bytes of constants");
  if (t_mode == ConstMode::record) {
    a->recorded.push_back(bytes);
  } else {
    OOMLAB_CHECK(a->cursor < a->recorded.size() && a->recorded[a->cursor] == bytes, "graph constants: launch ",
                 a->cursor + 1, " of the optimizer differs from the captured step's (",
                 a->cursor < a->recorded.size() ? a->recorded[a->cursor] : 0, " bytes recorded, ", bytes, " now)");
  }
  ++a->cursor;
  std::memcpy(a->host.data() + at, value, bytes);
  a->bytes = at + bytes;
  return t_mode == ConstMode::record ? static_cast<const char*>(a->dev) + at : nullptr;
}

namespace {
void graph_prepare(int device) { use_own_compute_stream(device); }

void graph_capture_begin(int device) {   // after graph_prepare: the stream is the device's own
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
  h.graph_consts_begin = &consts_begin;
  h.graph_consts_end = &consts_end;
  h.graph_consts_free = &consts_free;
}
}  // namespace oomlab::cuda
