// graphed_step.cpp — GraphedStep (graphed_step.h): warm-up, capture, replay.
#include "engine/train/graphed_step.h"

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

namespace oomlab {

GraphedStep::GraphedStep(TrainStep& step, Device device) : step_(step), device_(device) {
  OOMLAB_CHECK(device.is_meta() || device.type == DeviceType::cuda,
               "CUDA graphs need a CUDA device (or meta, which counts a ", "graph's memory); this run is on ",
               device.str());
  DeviceGraph::prepare(device);   // warm-up runs on the stream the capture will use
  step_.set_count_correct(false);
  step_.set_device_loss(true);   // gradient accumulation's loss sum stays on the device
}

StepOutput GraphedStep::run(const HostBatch& batch) {
  if (!x_.defined()) {
    MemoryContext ctx("input", "data");
    x_ = Tensor::empty(batch.shape, batch.input_dtype, device_, "static_input");
    y_ = Tensor::empty(batch_target_shape(batch), DType::i64, device_, "static_target");
  }
  OOMLAB_CHECK(batch.shape == x_.shape() && int64_t(batch.targets().size()) == y_.numel(), "CUDA graphs replay ",
               "one shape: this batch's input is ", shape_str(batch.shape), ", the captured step's ",
               shape_str(x_.shape()));
  batch_into(batch, x_, y_);
  ++steps_;
  if (steps_ <= kWarmupSteps) return step_.run(x_, y_, /*track_memory=*/false);
  if (!graph_) {
    capture();
    graph_->replay();   // the captured step's own constants were recorded at capture
  } else {
    // The optimizer's host side for this step (step counts, the schedule's lr): its
    // launches write their constants and launch nothing (device_graph.h).
    Optimizer& opt = step_.optimizer();
    graph_->replay([&opt] { opt.step(); });
  }
  ++replays_;
  StepOutput out;
  out.loss = loss_;
  out.correct_counted = false;
  return out;
}

Tensor capture_training_step(DeviceGraph& graph, TrainStep& step, const Tensor& x, const Tensor& y) {
  // As PyTorch's whole-network capture does: the last eager step's gradients go before the
  // capture, so the capture's empty_cache() can release their segments to the graph's pool.
  step.zero_grad();
  Tensor loss;
  graph.capture([&] {
    StepOutput out = step.run(x, y, /*track_memory=*/false);
    OOMLAB_CHECK_T(InternalError, !out.skipped && out.loss.defined(), "the captured step did not run whole");
    loss = out.loss;
  });
  return loss;
}

void GraphedStep::capture() {
  auto graph = std::make_unique<DeviceGraph>(device_);
  loss_ = capture_training_step(*graph, step_, x_, y_);
  graph_ = std::move(graph);
  captured_at_ = steps_;
  pool_reserved_bytes_ = allocator_for(device_).stat("graph_pools_reserved_bytes");
}

nlohmann::json GraphedStep::metrics() const {
  return {{"warmup_steps", kWarmupSteps}, {"captured_at_step", captured_at_},
          {"replays", replays_}, {"graph_pool_reserved_bytes", pool_reserved_bytes_}};
}

}  // namespace oomlab
