// checkpoint.h — activation checkpointing (torch.utils.checkpoint, non-reentrant form).
// A segment is a chain of steps x1 = step1(x0), x2 = step2(x1), ... run once in the
// normal forward with a saved-tensor hook installed (saved_tensor.h) that keeps only a
// handle per saved tensor: the graph is built as usual but the activations the segment's
// ops would save are freed. The first time backward unpacks one of them, the segment is
// re-run from its kept input (the first step's x0, detached, with its requires_grad) and
// each step's side inputs, and the re-run's saves fill the handles (k-th save of the
// forward <-> k-th save of the re-run). Contracts:
//  * Recompute happens at most once per segment; checkpoint_counters() counts segments,
//    segments that saved something and recomputes on this thread (a full backward
//    recomputes each segment that saved exactly once).
//  * Same results as without checkpointing, bit for bit: the re-run starts from the device
//    generator state the forward started from (identical dropout masks) and restores the
//    generator afterwards, under the autocast dtype the forward had (autocast.h; with a
//    fresh cast cache, so weights are cast again, as torch's re-run does); while it runs checkpoint_recomputing() is
//    true, which BatchNorm reads to use the batch statistics without updating running stats a second time.
//  * Kept: the segment's input and side inputs (detached: no graph, no reference cycle).
//    If one is modified in place before the recompute (version changed), backward throws
//    AutogradError naming the segment; so does a re-run that saves a different number of
//    tensors (a non-deterministic segment) or a second backward through freed handles.
//  * Inputs that need no grad (the input layer's images, token ids) are handled: the
//    re-run gives them the same requires_grad as in the forward.
//  * Segments do not nest: a step run while a segment is open on this thread must not
//    open another (the nn-level planner never plans nested segments).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace oomlab {

struct CheckpointFrame;

// Re-runs one step: x is the step's input, side its side inputs (as given to add_step).
using CheckpointReplayFn = std::function<Tensor(const Tensor& x, const std::vector<Tensor>& side)>;

class CheckpointSegment {
 public:
  // Opens a segment whose first step takes `input`; installs the saved-tensor hooks.
  CheckpointSegment(std::string name, const Tensor& input);
  ~CheckpointSegment();   // removes the hooks (the frame lives on in the graph's handles)
  CheckpointSegment(const CheckpointSegment&) = delete;
  CheckpointSegment& operator=(const CheckpointSegment&) = delete;
  // Before each step's forward: its side inputs (tensors it reads besides x; may be
  // undefined) and how to re-run it.
  void add_step(std::vector<Tensor> side, CheckpointReplayFn replay);

 private:
  std::shared_ptr<CheckpointFrame> frame_;
  struct HooksHolder;
  std::unique_ptr<HooksHolder> hooks_;
};

// One function as one segment: checkpoint(fn, x) like torch.utils.checkpoint.checkpoint.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x,
                  const std::string& name = "checkpoint");

// True while a segment is being re-run on this thread.
bool checkpoint_recomputing();

struct CheckpointCounters {
  int64_t segments = 0;              // segments opened in forward
  int64_t segments_with_saves = 0;   // ... whose ops saved at least one tensor
  int64_t recomputes = 0;            // segment re-runs in backward
  int64_t saved_tensors = 0;         // handles handed out in forward
};
CheckpointCounters checkpoint_counters();   // this thread's
void reset_checkpoint_counters();

}  // namespace oomlab
