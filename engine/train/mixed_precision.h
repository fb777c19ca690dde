// mixed_precision.h — the training-step side of mixed precision: AutocastStrategy (the
// forward and loss run under torch.autocast-style casting, engine/autograd/autocast.h)
// and GradScaler (dynamic loss scaling, torch.amp.GradScaler's algorithm and defaults).
// Contracts:
//  * GradScaler multiplies the loss by `scale` before backward; before the optimizer step it
//    unscales every gradient in place with one fused kernel per gradient that also raises
//    a device flag on any inf / NaN (kernels/optim.h amp_unscale), reads the flag once,
//    and skips the step when it is set. Dynamic: initial scale 2^16, x0.5 on a found inf
//    (tracker reset), x2 after growth_interval (2000) consecutive clean steps. Static:
//    a fixed scale, the step still skipped on inf / NaN. The scale is kept in float32 as
//    PyTorch keeps it, so the sequence of scales matches torch's bit for bit.
//  * On meta there are no values: nothing is found, the scale never moves, and the
//    allocations (the flag) are those of a real device.
//  * state_json()/load_state() carry the scale and growth tracker through checkpoints, so a
//    resumed run continues the same scale sequence (bit-exact resume).
#pragma once
#include <functional>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/autograd/autocast.h"
#include "engine/train/train_step.h"

namespace oomlab {

class AutocastStrategy : public StepStrategy {
 public:
  explicit AutocastStrategy(DType dtype) : dtype_(dtype) {}
  const char* name() const override { return "autocast"; }
  void before_forward(int64_t, int64_t) override { guard_.emplace(dtype_); }
  void after_forward(int64_t, int64_t) override { guard_.reset(); }
 private:
  DType dtype_;
  std::optional<AutocastGuard> guard_;
};

// --loss-scale: "dynamic", "static:S" (S > 0, finite), "none"; "auto" resolves to dynamic for
// fp16 (autocast or --half) and none otherwise (bfloat16 has float32's range).
struct LossScaleSpec {
  enum class Kind { none, dynamic, fixed } kind = Kind::none;
  double scale = 65536.0;   // initial (dynamic) or fixed scale
  std::string str() const;  // canonical text: "none", "dynamic", "static:S"
};
LossScaleSpec parse_loss_scale(const std::string& text, bool fp16);

class GradScaler : public StepStrategy {
 public:
  explicit GradScaler(LossScaleSpec spec, int64_t growth_interval = 2000);
  const char* name() const override { return "grad_scaler"; }
  Tensor backward_root(const Tensor& loss, int64_t micro, int64_t micro_count) override;
  bool before_optimizer_step(Optimizer& opt) override;
  void after_optimizer_step(Optimizer& opt, bool stepped) override;

  float scale() const { return scale_; }
  bool found_inf() const { return found_inf_; }          // in the last step
  // Sharded gradients (ZeRO): each rank sees only its shards, so the found-inf flag (a
  // float32 [1] on the gradients' device) is reduced (max) over the ranks before it is read,
  // as PyTorch's ShardedGradScaler does; every rank then skips or steps together.
  void set_found_inf_reduction(std::function<void(Tensor& flag)> reduce) { reduce_found_inf_ = std::move(reduce); }
  float last_step_scale() const { return used_scale_; }   // the scale the last step's loss used
  int64_t growth_tracker() const { return tracker_; }
  nlohmann::json state_json() const;                      // {"kind", "scale", "growth_tracker"}
  void load_state(const nlohmann::json& state);           // ValueError naming a bad field

 private:
  LossScaleSpec spec_;
  int64_t growth_interval_;
  float scale_;
  float used_scale_;
  int64_t tracker_ = 0;
  bool found_inf_ = false;
  std::function<void(Tensor& flag)> reduce_found_inf_;
};

}  // namespace oomlab
