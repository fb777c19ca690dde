// train_step.h — one training step (zero_grad -> forward -> loss -> backward -> step)
// with per-phase memory accounting, shared by `oomlab train`, `estimate` and the
// experiment runner so every number comes from the same code path.
// Contract: grads are reset with set_to_none before forward (PyTorch's default since
// 2.0), so they are allocated during backward; the phase figures are read from the
// device allocator's stats (PyTorch names).
// The loss follows the target's rank (which the dataset derives from the model's task):
// target [N] -> cross_entropy on logits [N, K] (classification); target [N, H, W] ->
// pixel_cross_entropy on logits [N, K, H, W] (segmentation); `correct` counts argmax hits
// (samples, or pixels for segmentation).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include <vector>

#include "engine/core/tensor.h"
#include "engine/data/dataloader.h"
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
  int64_t correct = 0;    // argmax hits in the batch: samples or pixels (0 on meta)
  StepMemory memory;
};

// Runs one step; resets the allocator's peak at the start so step_peak is this step's.
StepOutput train_step(nn::Module& model, Optimizer& opt, const Tensor& x, const Tensor& y,
                      bool track_memory = true);

// The task loss for (logits, target) as described above.
Tensor task_loss(const Tensor& logits, const Tensor& target);
// Argmax hits: count_correct for [N] targets, hit pixels for [N, H, W] targets. Host
// result, 0 on meta; never allocates on the device. With `confusion` (K*K, row = target
// class, column = prediction; must be sized by the caller) also accumulates counts.
int64_t count_task_correct(const Tensor& logits, const Tensor& target, std::vector<int64_t>* confusion = nullptr);
// Mean IoU over the classes present in target or prediction, from a K*K confusion matrix.
double mean_iou(const std::vector<int64_t>& confusion, int64_t num_classes);

// Host float images [N,C,H,W] / int64 labels [n] / int64 tokens [N,T] / int64 masks
// [N,H,W] -> tensors on `device` (meta: allocation only).
Tensor images_to_device(const float* data, const Shape& shape, Device device);
Tensor labels_to_device(const int64_t* data, int64_t n, Device device);
Tensor tokens_to_device(const int64_t* data, const Shape& shape, Device device);
Tensor masks_to_device(const int64_t* data, const Shape& shape, Device device);
// A HostBatch's input (images or tokens) and target (labels or masks) on `device`.
Tensor batch_input_to_device(const HostBatch& b, Device device);
Tensor batch_target_to_device(const HostBatch& b, Device device);

}  // namespace oomlab
