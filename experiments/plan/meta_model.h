// meta_model.h — the estimate's model on a meta device (memory_report.cpp and
// estimate_memory.cpp): a RunSpec's model built as the trainer builds it (its arch flags,
// input or sequence length, classes, checkpoint plan), and the batch it takes.
// Contracts: the input and target are the trainer's shapes (token ids are never read on
// meta: their values do not matter); errors name the flag that is wrong.
#pragma once
#include <string>

#include "engine/core/tensor.h"
#include "engine/nn/module.h"
#include "experiments/plan/run_spec.h"
#include "models/model_zoo.h"

namespace oomlab {

struct Built {
  nn::ModulePtr model;
  std::string model_name;
  ModelConfig cfg;
  Shape input;         // per sample: C,H,W or T
  int64_t classes;
  bool tokens = false, segmentation = false;
};

Built build_on_meta(const RunSpec& spec, Device device = meta_device());
// The batch's input on meta as the trainer hands it to the step (--channels-last: laid out
// so, 4-D inputs), and its targets ([B] labels or [B,H,W] masks).
Tensor make_input(const Built& b, int64_t batch, bool channels_last = false);
Tensor make_target(const Built& b, int64_t batch);
int64_t bytes_of(const nn::NamedTensors& ts);

}  // namespace oomlab
