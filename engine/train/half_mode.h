// half_mode.h — `--half` (the source's `model.half()`) and `--master-weights` (Apex O2):
// the other way to train in 16 bits, beside autocast (mixed_precision.h).
// Contracts:
//  * half_model(model, dtype) converts every floating parameter and buffer to `dtype` in
//    place (the tensors keep their identity: layers' handles and names stay valid; the
//    memory is reallocated, as `param.data = param.data.half()` does), except those of
//    BatchNorm layers, which stay float32: BN then takes 16-bit input with float32 weight,
//    bias and running stats (the source's "BN kept in fp32"). Int buffers are untouched.
//    Call it before any gradient or optimizer state exists.
//  * HalfIO casts a floating model input to the model's dtype (token ids stay int64); with
//    float32_outputs (Apex O2) the logits are cast back to float32 so the loss, and its
//    scaling, are computed in float32.
//  * MasterWeights keeps a float32 copy of every 16-bit parameter (float32 parameters, the
//    BN ones, are their own master) and is what the optimizer updates: before the step it
//    moves each 16-bit gradient into a float32 master gradient (freeing the 16-bit one),
//    after an update it copies the masters back into the model (rounded to 16 bits). A loss
//    scaler placed after it unscales the float32 master gradients, so small gradients are
//    not flushed to zero again by the unscale (why PyTorch refuses to unscale fp16 grads).
//    state_tensors()/load_state() carry the masters ("master.<name>") through checkpoints.
//  * Without master weights the optimizer updates the 16-bit parameters directly (its state
//    is 16-bit too), as with torch.optim on a half model: an update below half an ulp of
//    the weight is lost.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/nn/module.h"
#include "engine/train/train_step.h"

namespace oomlab {

void half_model(nn::Module& model, DType dtype);

class HalfIO : public StepStrategy {
 public:
  HalfIO(DType dtype, bool float32_outputs) : dtype_(dtype), float32_outputs_(float32_outputs) {}
  const char* name() const override { return "half_io"; }
  Tensor model_input(const Tensor& x) override;
  Tensor model_output(const Tensor& logits) override;
 private:
  DType dtype_;
  bool float32_outputs_;
};

class MasterWeights : public StepStrategy {
 public:
  explicit MasterWeights(nn::Module& model);
  const char* name() const override { return "master_weights"; }
  // What the optimizer is given: the float32 masters, named as the model's parameters.
  const nn::NamedTensors& parameters() const { return masters_; }
  void before_forward(int64_t micro, int64_t micro_count) override;   // clears the 16-bit grads
  bool before_optimizer_step(Optimizer& opt) override;
  void after_optimizer_step(Optimizer& opt, bool stepped) override;
  nn::NamedTensors state_tensors() const;             // "master.<name>" for the 16-bit parameters
  void load_state(const nn::NamedTensors& tensors);   // ValueError naming a missing / mismatched one

 private:
  struct Pair { Tensor model, master; };   // model: the 16-bit parameter
  std::vector<Pair> pairs_;
  nn::NamedTensors masters_;
};

}  // namespace oomlab
