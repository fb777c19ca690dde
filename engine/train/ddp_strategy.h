// ddp_strategy.h — DistributedDataParallel's reducer (engine/parallel) plugged into the
// training step: buffers broadcast from rank 0 before every forward, no_sync for every
// micro-batch but the last of an accumulated step, the bucketed all-reduce during the last
// backward and its completion (averaged gradients in .grad) before the optimizer step.
#pragma once
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/train/train_step.h"

namespace oomlab {

class DdpStrategy : public StepStrategy {
 public:
  explicit DdpStrategy(DistributedDataParallel& ddp) : ddp_(ddp) {}
  const char* name() const override { return "ddp"; }
  void before_forward(int64_t, int64_t) override { ddp_.broadcast_buffers(); }
  void before_backward(int64_t micro, int64_t micro_count) override {
    ddp_.prepare_for_backward(micro == micro_count - 1);
  }
  void after_backward(int64_t micro, int64_t micro_count) override {
    if (micro == micro_count - 1) ddp_.finalize_backward();
  }

 private:
  DistributedDataParallel& ddp_;
};

}  // namespace oomlab
