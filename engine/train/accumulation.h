// accumulation.h — gradient accumulation (`--accumulate K`) as a step strategy: the step's
// batch is K micro-batches of --batch B, loaded together in the sample order of one K*B
// batch, run as K forward/backward passes whose gradients add up (TrainStep weights each
// micro-batch's mean loss by its share, 1/K), then one optimizer step.
// Contracts:
//  * Without BatchNorm the update equals that of one K*B batch (up to float rounding:
//    tests/test_accumulation.cpp). BatchNorm sees B samples per forward: its batch
//    statistics come from the micro-batch and its running statistics are updated K times
//    per optimizer step, as in PyTorch; hence the gap the source's T5 table shows.
//  * The batch given to TrainStep::run must hold at least K samples.
#pragma once
#include <cstdint>

#include "engine/core/error.h"
#include "engine/train/train_step.h"

namespace oomlab {

class GradientAccumulation : public StepStrategy {
 public:
  explicit GradientAccumulation(int64_t k) : k_(k) {
    OOMLAB_CHECK(k >= 1, "gradient accumulation needs K >= 1 micro-batches per step (got ", k, ")");
  }
  const char* name() const override { return "accumulate"; }
  int64_t micro_batches(int64_t) const override { return k_; }
  int64_t k() const { return k_; }

 private:
  int64_t k_;
};

}  // namespace oomlab
