// train_step.cpp — the shared training step and host->device batch copies.
#include "engine/train/train_step.h"

#include <cstring>

#include "engine/memory/caching_allocator.h"
#include "engine/ops/loss.h"

namespace oomlab {

nlohmann::json StepMemory::to_json() const {
  return {{"start_allocated", start_allocated}, {"after_forward", after_forward},
          {"forward_peak", forward_peak},       {"after_backward", after_backward},
          {"backward_peak", backward_peak},     {"after_step", after_step},
          {"step_peak", step_peak},             {"reserved_peak", reserved_peak}};
}

StepOutput train_step(nn::Module& model, Optimizer& opt, const Tensor& x, const Tensor& y, bool track_memory) {
  CachingAllocator& al = allocator_for(x.device());
  auto cur = [&] { return al.stat("allocated_bytes.all.current"); };
  auto peak = [&] { return al.stat("allocated_bytes.all.peak"); };
  StepOutput out;
  StepMemory& m = out.memory;
  opt.zero_grad(/*set_to_none=*/true);
  if (track_memory) { al.reset_peak_stats(); m.start_allocated = cur(); }
  Tensor logits = model(x);
  {
    MemoryContext ctx("loss", "fwd");
    out.loss = cross_entropy(logits, y);
  }
  out.correct = count_correct(logits, y);
  logits = Tensor();   // the graph keeps what backward needs; drop our handle
  if (track_memory) { m.after_forward = cur(); m.forward_peak = peak(); al.reset_peak_stats(); }
  out.loss.backward();
  if (track_memory) { m.after_backward = cur(); m.backward_peak = peak(); al.reset_peak_stats(); }
  {
    MemoryContext ctx("optimizer", "optim");
    opt.step();
  }
  if (track_memory) {
    m.after_step = cur();
    m.step_peak = std::max({m.forward_peak, m.backward_peak, peak()});
    m.reserved_peak = al.stat("reserved_bytes.all.peak");
  }
  out.loss = out.loss.detach();
  return out;
}

Tensor images_to_device(const float* data, const Shape& shape, Device device) {
  MemoryContext ctx("input", "data");
  if (device.is_cpu() || device.is_meta()) {
    Tensor t = Tensor::empty(shape, DType::f32, device);
    if (device.is_cpu()) std::memcpy(t.raw_data(), data, t.nbytes());
    return t;
  }
  Tensor host = Tensor::empty(shape, DType::f32, cpu_device());
  std::memcpy(host.raw_data(), data, host.nbytes());
  Tensor t = Tensor::empty(shape, DType::f32, device);
  t.copy_(host);
  return t;
}

Tensor labels_to_device(const int64_t* data, int64_t n, Device device) {
  MemoryContext ctx("input", "data");
  if (device.is_cpu() || device.is_meta()) {
    Tensor t = Tensor::empty({n}, DType::i64, device);
    if (device.is_cpu()) std::memcpy(t.raw_data(), data, size_t(n) * 8);
    return t;
  }
  Tensor host = Tensor::empty({n}, DType::i64, cpu_device());
  std::memcpy(host.raw_data(), data, size_t(n) * 8);
  Tensor t = Tensor::empty({n}, DType::i64, device);
  t.copy_(host);
  return t;
}

}  // namespace oomlab
