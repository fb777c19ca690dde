// ema.h — WeightEma: exponential moving average of a model's weights (the role of
// torch.optim.swa_utils.AveragedModel with an EMA rule / timm's ModelEma).
// Contracts:
//  * Takes a model's parameters AND buffers as one NamedTensors (state_dict order); the
//    tensors that require grad are parameters (averaged), the others buffers (copied).
//    Shadow copies are allocated once, at construction, on each tensor's device/dtype
//    (the EMA costs one extra copy of the model).
//  * update() (after each optimizer step, under NoGradGuard):
//      parameters: ema = decay * ema + (1 - decay) * param   (the axpby kernel, in place)
//      buffers:    ema = buffer                              (BN running stats, counters)
//  * swap_in() makes the model's tensors hold the EMA values for evaluation; swap_out()
//    restores the trained values exactly. Zero-copy when a tensor owns its whole storage
//    (the storages are exchanged), otherwise a three-way copy through one temporary.
//  * state_tensors() names "ema.<name>"; load_state validates names and shapes, and
//    restores decay / num_updates too when given state_json()'s object.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/optim/optimizer.h"

namespace oomlab {

class WeightEma {
 public:
  WeightEma(const NamedTensors& tensors, double decay = 0.999);
  void update();
  void swap_in();
  void swap_out();
  bool swapped_in() const { return swapped_; }
  double decay() const { return decay_; }
  void set_decay(double decay);
  int64_t num_updates() const { return num_updates_; }

  // EMA values (handles, not copies) in parameter-then-buffer order, "ema.<name>".
  NamedTensors state_tensors() const;
  nlohmann::json state_json() const;   // {"decay", "num_updates", "params": [...], "buffers": [...]}
  // Copies "ema.<name>" tensors into the shadows (every name required, no extras); with a
  // non-null `state` also checks its name lists and restores decay / num_updates.
  // Throws ValueError/ShapeError naming the entry; not allowed while swapped in; on
  // error nothing changes.
  void load_state(const NamedTensors& tensors, const nlohmann::json& state = nullptr);

 private:
  struct Entry {
    std::string name;
    Tensor model, shadow;
    bool average;   // parameters: true; buffers: false (copied)
  };
  static void swap_values(Entry& e);
  std::vector<Entry> entries_;
  double decay_;
  int64_t num_updates_ = 0;
  bool swapped_ = false;
};

}  // namespace oomlab
