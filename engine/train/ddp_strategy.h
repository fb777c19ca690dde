// ddp_strategy.h — DistributedDataParallel's reducer (engine/parallel) plugged into the
// training step: buffers broadcast from rank 0 before every forward, no_sync for every
// micro-batch but the last of an accumulated step, the bucketed all-reduce during the last
// backward and its completion (averaged gradients in .grad) before the optimizer step.
// ZeRO (the reducer's zero_stage): the module's gradients cleared before the first
// micro-batch (the optimizer holds only the shards), each micro-batch's reduction finished
// after its backward (stage 2 reduces every one), the shards' gradients before the
// optimizer step (before a loss scaler unscales them: this strategy comes first), and after
// an optimizer step that ran, the updated shards all-gathered into the parameters.
#pragma once
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/train/train_step.h"

namespace oomlab {

class DdpStrategy : public StepStrategy {
 public:
  explicit DdpStrategy(DistributedDataParallel& ddp) : ddp_(ddp) {}
  const char* name() const override { return "ddp"; }
  void before_forward(int64_t micro, int64_t) override {
    if (micro == 0) ddp_.zero_model_grads();
    ddp_.broadcast_buffers();
  }
  void before_backward(int64_t micro, int64_t micro_count) override {
    ddp_.prepare_for_backward(micro == micro_count - 1);
  }
  void after_backward(int64_t, int64_t) override { ddp_.finalize_backward(); }   // no_sync: nothing to wait for
  bool before_optimizer_step(Optimizer&) override {
    ddp_.prepare_shard_grads();
    return true;
  }
  void after_optimizer_step(Optimizer&, bool stepped) override {
    if (stepped) ddp_.gather_parameters();
  }

 private:
  DistributedDataParallel& ddp_;
};

}  // namespace oomlab
