// train_step.h — one training step in phases, shared by `oomlab train`, `estimate` and the
// experiment runner so every number comes from the same code path:
//   zero_grad -> [forward + loss -> backward] per micro-batch -> optimizer step
// Each phase is its own function and memory frame ("step/<phase>" unless a layer's own
// frame is more precise), so traces and per-phase stats show where memory goes.
// Techniques plug in through StepStrategy (loss scaling, micro-batching, recompute,
// gradient hooks, OOM handling); with none the step is plain PyTorch:
// `opt.zero_grad(set_to_none=True); loss = crit(model(x), y); loss.backward(); opt.step()`.
// Contracts:
//  * Grads are reset with set_to_none before forward (PyTorch's default since 2.0), so they
//    are allocated during backward; phase figures are read from the device allocator's
//    stats (PyTorch names).
//  * Micro-batches are consecutive slices (views) of the batch along dim 0, of near-equal
//    size; each one's loss is scaled by its share of the samples before backward (so the
//    gradients are those of the whole batch's mean loss: gradient accumulation's loss / K),
//    the reported loss is their sample-weighted mean, `correct` their sum.
//  * An OutOfMemoryError in any phase first releases the step's graph and partial
//    gradients, then asks the strategies in order (on_out_of_memory); the first answer
//    other than `propagate` decides: `skip` makes the step `skipped` (nothing was updated:
//    the optimizer creates its state before any update), `split` reruns the whole batch
//    as twice as many micro-batches (at most one sample each; past that the error is
//    rethrown, saying so). With no answer it is rethrown, naming the phase. BatchNorm
//    running statistics a failed attempt's forward updated stay updated (as in PyTorch).
// The loss follows the target's rank (which the dataset derives from the model's task):
// target [N] -> cross_entropy on logits [N, K] (classification); target [N, H, W] ->
// pixel_cross_entropy on logits [N, K, H, W] (segmentation); `correct` counts argmax hits
// (samples, or pixels for segmentation).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/error.h"
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
  Tensor loss;            // scalar (value readable on cpu); undefined when skipped
  int64_t correct = 0;    // argmax hits in the batch: samples or pixels (0 on meta)
  int64_t scored = 0;     // the positions `correct` counts over: samples, pixels, or a causal LM's next tokens
  bool correct_counted = true;   // false: `correct` was not counted (TrainStep::set_count_correct)
  StepMemory memory;
  bool skipped = false;   // an OOM was handled by a strategy: no update happened
  std::string skip_reason, skip_phase;   // skip_phase: forward | backward | optimizer (| input: trainer)
  int64_t micro_batches = 1;   // how many micro-batches the step finally ran as
  int64_t oom_splits = 0;      // out-of-memory retries with twice the micro-batches
};

// What a strategy answers to an out-of-memory error in a step (see TrainStep).
enum class OomAction { propagate, skip, split };

// What a technique may change in a step. Every method has a neutral default; a step runs
// its strategies in the order given (e.g. accumulation before loss scaling).
class StepStrategy {
 public:
  virtual ~StepStrategy() = default;
  virtual const char* name() const = 0;
  // Micro-batches the batch of `batch` samples is split into (gradient accumulation); the
  // step uses the largest any strategy asks for.
  virtual int64_t micro_batches(int64_t batch) const { return 1; }
  // The batch's input as the model takes it (--half: cast to float16), and the model's
  // output as the loss takes it (Apex O2: back to float32); applied in strategy order.
  virtual Tensor model_input(const Tensor& x) { return x; }
  virtual Tensor model_output(const Tensor& logits) { return logits; }
  // Around each micro-batch's forward + loss (autocast, recompute policies).
  virtual void before_forward(int64_t micro, int64_t micro_count) {}
  virtual void after_forward(int64_t micro, int64_t micro_count) {}
  // The tensor backward starts from, given the micro-batch's loss already weighted by its
  // share of the batch (loss scaling).
  virtual Tensor backward_root(const Tensor& loss, int64_t micro, int64_t micro_count) { return loss; }
  // Around each micro-batch's backward (DDP's no_sync for all but the last one).
  virtual void before_backward(int64_t micro, int64_t micro_count) {}
  virtual void after_backward(int64_t micro, int64_t micro_count) {}
  // After the last backward: unscale, check, reduce, clip; false skips the update.
  virtual bool before_optimizer_step(Optimizer& opt) { return true; }
  virtual void after_optimizer_step(Optimizer& opt, bool stepped) {}
  // An OutOfMemoryError in `phase` ("forward", "backward", "optimizer") while the batch of
  // `batch` samples ran as `micro_count` micro-batches; graph and gradients are released.
  virtual OomAction on_out_of_memory(const OutOfMemoryError& error, const char* phase, int64_t micro_count,
                                     int64_t batch) {
    return OomAction::propagate;
  }
};

class TrainStep {
 public:
  TrainStep(nn::Module& model, Optimizer& opt, std::vector<StepStrategy*> strategies = {});
  // Runs the phases; with track_memory, resets the allocator's peak first so
  // memory.step_peak is this step's.
  StepOutput run(const Tensor& x, const Tensor& y, bool track_memory = true);
  // Off: steps do not count argmax hits (it reads the logits on the host, which a graph
  // capture cannot do); their StepOutput says correct_counted = false.
  void set_count_correct(bool on) { count_correct_ = on; }
  // On: the micro-batches' loss is summed on the loss's device (float64: their losses
  // weighted by their sizes, then times 1 / batch; within an ulp of the host's division)
  // instead of read to the host after each one, so a graph capture can hold an accumulating
  // step; StepOutput.loss is then that device scalar.
  void set_device_loss(bool on) { device_loss_ = on; }
  Optimizer& optimizer() { return opt_; }

  // The phases, for strategies and tests that drive them one by one.
  void zero_grad();                                                            // "step/zero_grad"
  Tensor forward_loss(const Tensor& x, const Tensor& y, StepOutput* counts);     // "loss/fwd" + layers
  void backward(const Tensor& root);                                           // "step/bwd" + layers
  bool optimizer_step();                                                       // "optimizer/optim"

 private:
  // One try at the step as `micro_count` micro-batches; *phase follows where it is.
  StepOutput attempt(const Tensor& x, const Tensor& y, int64_t micro_count, bool track_memory, const char** phase);

  nn::Module& model_;
  Optimizer& opt_;
  std::vector<StepStrategy*> strategies_;
  bool count_correct_ = true;
  bool device_loss_ = false;
};

// TrainStep(model, opt).run(x, y, track_memory): a plain step.
StepOutput train_step(nn::Module& model, Optimizer& opt, const Tensor& x, const Tensor& y,
                      bool track_memory = true);

// The task loss for (logits, target) as described above; [B, T, V] logits against [B, T]
// token targets: cross entropy over the B*T rows (ignored targets skipped).
Tensor task_loss(const Tensor& logits, const Tensor& target);
// A causal language model's targets for ids [B, T]: ids shifted left by one, the last
// position kNllIgnoreIndex (as Hugging Face pads its labels); TrainStep uses them when the
// model maps token input to [B, T, V] logits.
Tensor next_token_targets(const Tensor& ids);
// What a model's output on x is scored against, in training and evaluation alike: a causal
// language model's ([B, T, V] logits over int64 ids [B, T], with the dataset's [B] labels)
// next_token_targets(x), B * (T - 1) positions; otherwise y itself, all its elements.
struct TaskTargets {
  Tensor y;
  int64_t scored = 0;   // positions accuracy counts (ignored ones excluded)
};
TaskTargets task_targets(const Tensor& logits, const Tensor& x, const Tensor& y);
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
// The same batch into existing tensors of its shapes (graph mode's static inputs): the
// input into x, the target into y, with the same copies; InternalError on a shape mismatch.
void batch_into(const HostBatch& b, const Tensor& x, const Tensor& y);
// The target's shape on the device: [n] for class labels, target_shape for masks.
Shape batch_target_shape(const HostBatch& b);

}  // namespace oomlab
