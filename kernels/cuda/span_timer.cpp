// span_timer.cpp — the CUDA backend's span timer (engine/core/backend.h span_timer_*): the
// device time of a profiler span (engine/memory/memory_export.h OpSpanScope) from a pair of
// CUDA events recorded on the device's compute stream at the span's start and end, read
// (cudaEventSynchronize on the end, cudaEventElapsedTime) when the profiler's spans are taken.
// No synchronisation while the step runs, so the step keeps its pace (unlike
// OOMLAB_CUDA_SYNC=1); between the marks the device time includes any idle time the host
// leaves it. Contracts: a handle is (logical device << 32) | pair index; pairs are created
// on first use per device and reused after span_timer_reset; nothing is marked while the
// stream captures a graph (a recorded event would become a graph node), and at most
// kMaxPairs pairs per device are live (further spans go untimed: -1); thread-safe (one mutex).
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "engine/core/backend.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_stream.h"

namespace oomlab::cuda {
namespace {
constexpr size_t kMaxPairs = 1 << 18;

struct Marks { cudaEvent_t start = nullptr, stop = nullptr; };
struct DevicePool { std::vector<Marks> marks; size_t used = 0; };

std::mutex g_mu;
std::map<int, DevicePool> g_pools;   // logical device -> its pairs

int64_t handle_of(int device, size_t index) { return (int64_t(device) << 32) | int64_t(index); }
int device_of(int64_t h) { return int(h >> 32); }
size_t index_of(int64_t h) { return size_t(h & 0xffffffffLL); }

// The pair behind a handle, or nullptr for a handle that reset made stale.
Marks* marks_of(int64_t h) {
  auto it = g_pools.find(device_of(h));
  if (it == g_pools.end() || index_of(h) >= it->second.used) return nullptr;
  return &it->second.marks[index_of(h)];
}

int64_t span_timer_start(int device) {
  DeviceGuard guard(device);
  cudaStream_t stream = compute_stream(device);
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  if (capturing != cudaStreamCaptureStatusNone) return -1;
  std::lock_guard<std::mutex> lock(g_mu);
  DevicePool& pool = g_pools[device];
  if (pool.used == kMaxPairs) return -1;
  if (pool.used == pool.marks.size()) {
    Marks m;
    CUDA_CHECK(cudaEventCreate(&m.start));
    CUDA_CHECK(cudaEventCreate(&m.stop));
    pool.marks.push_back(m);
  }
  const size_t index = pool.used++;
  CUDA_CHECK(cudaEventRecord(pool.marks[index].start, stream));
  return handle_of(device, index);
}

void span_timer_stop(int64_t h) {
  const int device = device_of(h);
  DeviceGuard guard(device);
  std::lock_guard<std::mutex> lock(g_mu);
  if (Marks* m = marks_of(h)) CUDA_CHECK(cudaEventRecord(m->stop, compute_stream(device)));
}

int64_t span_timer_elapsed_us(int64_t h) {
  DeviceGuard guard(device_of(h));
  std::lock_guard<std::mutex> lock(g_mu);
  Marks* m = marks_of(h);
  if (!m) return -1;
  CUDA_CHECK(cudaEventSynchronize(m->stop));
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, m->start, m->stop));
  return std::llround(double(ms) * 1000.0);
}

void span_timer_reset() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (auto& [device, pool] : g_pools) pool.used = 0;
}
}  // namespace

void add_span_timer_hooks(BackendHooks& h) {
  h.span_timer_start = &span_timer_start;
  h.span_timer_stop = &span_timer_stop;
  h.span_timer_elapsed_us = &span_timer_elapsed_us;
  h.span_timer_reset = &span_timer_reset;
}
}  // namespace oomlab::cuda
