// graphed_step.h — a training step captured once and replayed (CUDA graphs: PyTorch's
// whole-network capture, torch.cuda.graph / torch.compile(mode="reduce-overhead")).
// The run, as PyTorch's documentation recommends:
//   1. kWarmupSteps eager steps from static input buffers, on the stream the capture will
//      use (lazy library state, cuDNN plans, optimizer buffers and the allocator's cache
//      exist before the capture);
//   2. the next step is captured whole (zero_grad, forward, loss, backward, optimizer step)
//      into a DeviceGraph (engine/memory/device_graph.h: private memory pool), then replayed
//      once for its batch;
//   3. every later step copies its batch into the static buffers and replays.
// Contracts:
//  * Every batch has the shape of the first (the trainer's loader drops the last partial
//    batch); a ValueError otherwise.
//  * Before each replay after the first, the optimizer's step runs again on the host
//    (device_graph.h, replay's refresh): its bookkeeping advances (Adam's step counts) and
//    its launches' constants (the schedule's learning rate, bias corrections) are written
//    to device memory, so schedules, SGD, Adam and AdamW replay as they run eagerly; and
//    dropout draws the numbers the eager step would (the generator advances per replay).
//    Every other host-side value is frozen: loss scaling (the caller refuses it), and
//    random numbers of ops that cannot redraw them (fused attention's dropout: a ValueError
//    at capture). Argmax hits are not counted (StepOutput.correct_counted = false):
//    counting reads the logits on the host.
//  * Memory: the static inputs are allocated once (before warm-up); the capture empties the
//    cache, then its allocations live in the graph's pool (with the optimizer's 1 MiB of
//    constants); a replay allocates nothing. metrics() reports the warm-up, the captured
//    step, the replays and the pool's bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>

#include "engine/data/dataloader.h"
#include "engine/memory/device_graph.h"
#include "engine/train/train_step.h"

namespace oomlab {

// One training step of `step` on the static x, y captured into `graph` (its gradients
// dropped first, as PyTorch's whole-network capture does); returns the step's loss, a static
// output. GraphedStep's capture, and estimate's (experiments/plan/memory_report.cpp).
Tensor capture_training_step(DeviceGraph& graph, TrainStep& step, const Tensor& x, const Tensor& y);

class GraphedStep {
 public:
  static constexpr int64_t kWarmupSteps = 3;   // PyTorch's examples and make_graphed_callables
  GraphedStep(TrainStep& step, Device device);
  // One optimizer step on `batch` (warm-up, capture + replay, or replay).
  StepOutput run(const HostBatch& batch);
  nlohmann::json metrics() const;

 private:
  void capture();

  TrainStep& step_;
  Device device_;
  Tensor x_, y_;            // static inputs
  Tensor loss_;             // the captured step's loss (a static output)
  std::unique_ptr<DeviceGraph> graph_;
  int64_t steps_ = 0, replays_ = 0, captured_at_ = 0;
  int64_t pool_reserved_bytes_ = 0;
};

}  // namespace oomlab
