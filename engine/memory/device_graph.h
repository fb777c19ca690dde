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
//  * Arguments passed by value to kernels (loop bounds, scales) are frozen at capture: a
//    replay repeats them. Two exceptions (kernels/cuda/graph_consts.h), through a block of
//    device memory the captured kernels read:
//    - the optimizer launches' constants (learning rate, bias corrections), recorded at
//      capture and rewritten before each replay but the first by `refresh`, which runs the
//      optimizer's step again on the host: its bookkeeping advances and each launch writes
//      its constants without launching anything (the same launches in the same order as
//      at capture, or a ValueError);
//    - random numbers: during the capture only graph-safe ops may draw from the device's
//      generator (dropout; others are a ValueError, engine/core/rng.h); each replay but the
//      first advances the generator by the capture's draws and hands the kernels the
//      offset they add to their captured base, so every replay draws exactly the numbers
//      the same step would draw eagerly.
//  * If `work` throws, the capture is abandoned (nothing was executed), the pool released,
//    and the exception propagates; the DeviceGraph stays empty (replay() is an error).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include "engine/core/device.h"

namespace oomlab {

class DeviceGraph {
 public:
  // Device memory for the optimizer launches' constants (graph_consts.h), allocated in the
  // graph's pool at capture on every device (meta counts it too): 1 MiB holds ~14,000
  // launches' float64 Adam constants.
  static constexpr size_t kConstBytes = size_t(1) << 20;
  explicit DeviceGraph(Device device);   // ValueError where graphs cannot run
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  // Moves the device's work to its capturable stream now (call before warm-up work so it
  // runs where the capture will); capture() does it too.
  static void prepare(Device device);
  void capture(const std::function<void()>& work);   // once per DeviceGraph
  // The first replay after the capture runs the captured step as recorded; later ones run
  // `refresh` first (see above) and draw the next random numbers.
  void replay(const std::function<void()>& refresh = {});
  bool captured() const { return captured_; }
  uint64_t pool_id() const { return pool_; }

 private:
  Device device_;
  void* graph_ = nullptr;   // the backend's instantiated graph (cuda); nullptr on meta
  void* consts_ = nullptr;  // the graph's constant arena (cuda)
  void* consts_block_ = nullptr;   // its device memory: kConstBytes from the graph's pool

  uint64_t pool_ = 0;
  bool captured_ = false, replayed_ = false;
  uint64_t rng_at_capture_ = 0;          // the device generator's offset when the capture began
  uint64_t rng_blocks_per_replay_ = 0;   // Philox blocks the captured work reserved

  void record(const std::function<void()>& work);
  void refresh_pass(const std::function<void()>& refresh);
};

}  // namespace oomlab
