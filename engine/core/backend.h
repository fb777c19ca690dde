// backend.h — runtime hooks of accelerator backends, registered with their kernels (the
// CUDA backend does so in kernels/cuda/cuda_backend.cpp), and the libraries each backend
// is built on (register_library_info: BLAS, cuDNN ...), so that engine code can wait
// for a device, describe it in results provenance and set its numerics switches without
// including any accelerator header. cpu and meta register nothing:
//   * device_synchronize(cpu|meta) returns at once (their kernels are synchronous);
//   * device_properties(cpu|meta) is empty (results.cpp describes the host itself);
//   * set_backend_options() applies the options to every registered backend and is a
//     no-op for device types without one (a CPU-only build accepts the flags; results
//     record the switches only where a backend reports them in device_properties).
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/device.h"

namespace oomlab {

// Numerics / autotuning switches of an accelerator backend. A field left unset keeps the
// backend's current value: PyTorch's defaults (torch.backends.cuda.matmul.allow_tf32 =
// false, torch.backends.cudnn.allow_tf32 = true, torch.backends.cudnn.benchmark = false,
// torch.backends.cudnn.deterministic = false, no cuDNN workspace limit) or what the OOMLAB_* environment set.
struct BackendOptions {
  std::optional<bool> matmul_allow_tf32;
  std::optional<bool> cudnn_allow_tf32;
  std::optional<bool> cudnn_benchmark;
  std::optional<bool> cudnn_deterministic;
  std::optional<size_t> cudnn_workspace_limit;   // 0 = unlimited
};

using DeviceProperties = std::vector<std::pair<std::string, std::string>>;

struct BackendHooks {
  void (*synchronize)(int device_index) = nullptr;
  DeviceProperties (*properties)(int device_index) = nullptr;   // name, versions, numerics switches
  void (*set_options)(const BackendOptions& options) = nullptr;
  std::string (*physical)(int device_index) = nullptr;   // the physical device a logical one runs on
  // Page-locked host memory (engine/memory/pinned_host.h); all three or none.
  void* (*pinned_alloc)(size_t bytes) = nullptr;
  void (*pinned_free)(void* block) = nullptr;
  void (*copy_from_pinned)(void* device_dst, const void* pinned_src, size_t bytes, int device_index) = nullptr;
  // A copy from pageable host memory straight into device memory, queued on the device's
  // compute stream; it returns once the source may be reused (cudaMemcpyAsync's rule).
  void (*copy_from_host)(void* device_dst, const void* host_src, size_t bytes, int device_index) = nullptr;
  // Graph capture and replay (CUDA graphs; engine/memory/device_graph.h); all five or none.
  // graph_prepare moves the device's work to a stream that can be captured (from then on);
  // graph_capture_end returns the instantiated graph, or nullptr (keep == false: the
  // capture is abandoned, its work discarded).
  void (*graph_prepare)(int device_index) = nullptr;
  void (*graph_capture_begin)(int device_index) = nullptr;
  void* (*graph_capture_end)(int device_index, bool keep) = nullptr;
  void (*graph_replay)(void* graph, int device_index) = nullptr;
  void (*graph_destroy)(void* graph) = nullptr;
  // Per-launch constants of a graph in device memory (kernels/cuda/graph_consts.h): a pass
  // begins on this thread with mode 1 (record, during the capture; arena nullptr creates
  // one over the caller's device block of `bytes`, returned) or 2 (refresh, before a
  // replay) and ends with graph_consts_end (the slots copied into the block on the compute
  // stream; nullptr only closes the pass); graph_consts_free with the graph (not the block).
  // The pass's first slot holds rng_delta, the offset graph-safe random kernels add to their
  // captured Philox base (engine/core/rng.h): 0 at capture, the generator's advance since
  // the capture before each replay.
  void* (*graph_consts_begin)(int device_index, void* arena, int mode, void* device_block, size_t bytes,
                              uint64_t rng_delta) = nullptr;
  void (*graph_consts_end)(void* arena) = nullptr;
  void (*graph_consts_free)(void* arena) = nullptr;
  // Device time of profiler spans (engine/memory/memory_export.h's OpSpanScope); all four or
  // none. span_timer_start marks the device's compute stream and returns a handle (-1: not
  // timed, e.g. during graph capture); span_timer_stop marks the end; span_timer_elapsed_us
  // waits for the end mark and returns the device time between the two marks in
  // microseconds; span_timer_reset drops every handle (their marks are reused).
  int64_t (*span_timer_start)(int device_index) = nullptr;
  void (*span_timer_stop)(int64_t handle) = nullptr;
  int64_t (*span_timer_elapsed_us)(int64_t handle) = nullptr;
  void (*span_timer_reset)() = nullptr;
};

void register_backend_hooks(DeviceType type, const BackendHooks& hooks);
BackendHooks backend_hooks(DeviceType type);   // nullptr members: the backend has none
// Libraries a backend was built on, for results provenance ("blas" -> "OpenBLAS 0.3.21 ...");
// registered with the backend's kernels, read after ensure_kernels_registered().
void register_library_info(const std::string& key, const std::string& value);
std::vector<std::pair<std::string, std::string>> library_info();
void device_synchronize(const Device& device);
// Copies `bytes` from host memory into device memory through the backend's copy_from_host;
// false (nothing done) when the device is cpu / meta or its backend has no such hook.
bool copy_host_to_device(const Device& device, void* device_dst, const void* host_src, size_t bytes);
DeviceProperties device_properties(const Device& device);
// The physical device a logical device runs on, for results: "host" for cpu:N and meta:N
// (meta:N emulates a device but runs on the host), the backend's answer for accelerators
// (e.g. "cuda:0 NVIDIA H100 80GB HBM3"), "unknown" when the backend does not say.
std::string physical_device(const Device& device);
void set_backend_options(const BackendOptions& options);

// "on"/"off"/"true"/"false"/"1"/"0" -> bool; ValueError naming `what` otherwise.
bool parse_switch(const std::string& value, const std::string& what);

}  // namespace oomlab
