// device_graph.h — DeviceGraph: work captured once and replayed (torch.cuda.CUDAGraph with
// its private memory pool).
// Contracts:
//  * cuda: capture() runs `work` with the device's stream in capture mode (nothing executes;
//    kernels, library calls and stream-ordered copies are recorded) and instantiates the
//    graph; replay() launches it on the device's stream. Work that synchronizes with the
//    host (a .item(), a device->host copy, cudaMalloc outside the allocator's care) fails
//    the capture: CUDA reports it and capture() throws, naming the operation's error.
//  * meta: nothing runs on meta, so capture() runs `work` for its allocations only and
//    replay() does nothing — exactly what the CUDA allocator sees (a replay allocates
//    nothing). cpu (and any device without the backend's graph hooks): ValueError.
//  * Memory (engine/memory/caching_allocator.h, graph pools): capture() first releases the
//    allocator's free cached segments (empty_cache, as torch.cuda.graph does on entry, "to
//    free as much memory as we can for the graph"); then every allocation inside
//    capture() comes from a private pool of the device's allocator; tensors freed in the
//    capture go back to that pool, which stays reserved for the graph (a replay writes
//    into the same addresses) until the DeviceGraph dies. Tensors created in the capture
//    and kept (the step's loss, the gradients) are the graph's static outputs: a replay
//    overwrites them in place.
//  * Arguments passed by value to kernels (learning rate, random seeds and offsets, loop
//    bounds) are frozen at capture: a replay repeats them. Callers keep them constant
//    (see engine/train/graphed_step.h).
//  * If `work` throws, the capture is abandoned (nothing was executed), the pool released,
//    and the exception propagates; the DeviceGraph stays empty (replay() is an error).
#pragma once
#include <cstdint>
#include <functional>

#include "engine/core/device.h"

namespace oomlab {

class DeviceGraph {
 public:
  explicit DeviceGraph(Device device);   // ValueError where graphs cannot run
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  // Moves the device's work to its capturable stream now (call before warm-up work so it
  // runs where the capture will); capture() does it too.
  static void prepare(Device device);
  void capture(const std::function<void()>& work);   // once per DeviceGraph
  void replay();
  bool captured() const { return captured_; }
  uint64_t pool_id() const { return pool_; }

 private:
  Device device_;
  void* graph_ = nullptr;   // the backend's instantiated graph (cuda); nullptr on meta
  uint64_t pool_ = 0;
  bool captured_ = false;
};

}  // namespace oomlab
