// oom_recovery.h — `--on-oom raise|skip|split` as a step strategy: what a training step does
// when the device runs out of memory (the source's T9.7: catch the OOM and skip the batch).
//   raise: the OutOfMemoryError propagates (the run dies; PyTorch's default).
//   skip:  the batch is dropped, nothing is updated; the trainer counts it and its samples.
//   split: the batch is rerun as twice as many micro-batches (gradient accumulation over
//          halves, quarters, ...) until it fits; no sample is lost. An OOM in the optimizer
//          phase propagates: the update's memory (parameters, gradients, state) does not
//          depend on the batch, so splitting cannot help.
// Contracts (TrainStep): the failed attempt's graph and partial gradients are released
// before the policy is asked; parameters and optimizer state are never half-updated (the
// optimizer creates its state before any update). A split step's update equals the
// unsplit one up to float rounding when the model has no BatchNorm (its statistics would
// come from the smaller micro-batches).
#pragma once
#include <cstdint>
#include <string>

#include "engine/core/error.h"
#include "engine/train/train_step.h"

namespace oomlab {

enum class OnOom { raise, skip, split };

inline OnOom parse_on_oom(const std::string& s) {
  if (s == "raise") return OnOom::raise;
  if (s == "skip") return OnOom::skip;
  if (s == "split") return OnOom::split;
  throw ValueError(str_cat("unknown out-of-memory policy '", s, "' (expected raise, skip or split)"));
}

inline const char* on_oom_name(OnOom p) {
  return p == OnOom::raise ? "raise" : p == OnOom::skip ? "skip" : "split";
}

class OomRecovery : public StepStrategy {
 public:
  explicit OomRecovery(OnOom policy) : policy_(policy) {}
  const char* name() const override { return "on-oom"; }
  OomAction on_out_of_memory(const OutOfMemoryError&, const char* phase, int64_t, int64_t) override {
    if (policy_ == OnOom::skip) return OomAction::skip;
    if (policy_ == OnOom::split && std::string(phase) != "optimizer") return OomAction::split;
    return OomAction::propagate;
  }
  OnOom policy() const { return policy_; }

 private:
  OnOom policy_;
};

}  // namespace oomlab
