// train_step.h — one training step (zero_grad -> forward -> loss -> backward -> step)
// with per-phase memory accounting, shared by `oomlab train`, `estimate` and the
// experiment runner so every number comes from the same code path.
// Contract: grads are reset with set_to_none before forward (PyTorch's default since
// 2.0), so they are allocated during backward; the phase figures are read from the
// device allocator's stats (PyTorch names).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "engine/core/tensor.h"
#include "engine/nn/module.h"
#include "engine/optim/optimizer.h"

namespace oomlab {

struct StepMemory {
  int64_t start_allocated = 0;      // before forward (params, buffers, optimizer state, input)
  int64_t after_forward = 0;        // + activations saved for backward + loss
  int64_t forward_peak = 0;
  int64_t after_backward = 0;       // + parameter grads, activations freed
  int64_t backward_peak = 0;
  int64_t after_step = 0;           // + optimizer state (first step)
  int64_t step_peak = 0;            // allocated_bytes.all.peak over the whole step
  int64_t reserved_peak = 0;
  nlohmann::json to_json() const;
};

struct StepOutput {
  Tensor loss;            // scalar (value readable on cpu)
  int64_t correct = 0;    // argmax hits in the batch (0 on meta)
  StepMemory memory;
};

// Runs one step; resets the allocator's peak at the start so step_peak is this step's.
StepOutput train_step(nn::Module& model, Optimizer& opt, const Tensor& x, const Tensor& y,
                      bool track_memory = true);

// Host float images [N,C,H,W] / int64 labels -> tensors on `device` (meta: allocation only).
Tensor images_to_device(const float* data, const Shape& shape, Device device);
Tensor labels_to_device(const int64_t* data, int64_t n, Device device);

}  // namespace oomlab
