// checkpoint.cpp — non-reentrant activation checkpointing: a frame per segment holding its
// input, side inputs, start RNG state and replay steps; forward saves become handles
// (index into the frame); the first unpack re-runs the segment and fills them.
#include "engine/autograd/checkpoint.h"

#include <optional>
#include <utility>

#include "engine/autograd/autocast.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"

namespace oomlab {

namespace {
thread_local int t_recomputing = 0;
thread_local CheckpointCounters t_counters;

struct Kept {              // a kept input: detached (no graph) + what the re-run needs
  Tensor value;
  bool requires_grad = false;
  uint64_t version = 0;
};
Kept keep(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.detach(), t.requires_grad(), t.version()};
}
}  // namespace

struct CheckpointFrame {
  std::string name;
  Device device;
  Generator rng;                      // the device generator when the segment started
  std::optional<DType> autocast;      // the autocast dtype then (the re-run casts as the forward did)
  Kept input;
  struct Step {
    std::vector<Kept> side;
    CheckpointReplayFn replay;
  };
  std::vector<Step> steps;
  int64_t saves = 0;                  // handles handed out in forward
  bool recomputed = false;
  std::vector<Tensor> values;         // filled by the re-run, taken by unpack

  Tensor fresh(const Kept& k, const char* what) const {
    if (!k.value.defined()) return Tensor();
    OOMLAB_CHECK_T(AutogradError, k.value.version() == k.version, "checkpoint '", name, "': its ", what, " (",
                   k.value.str(), ") was modified in place after the forward (version ", k.version, " -> ",
                   k.value.version(), "); recomputing the segment would give different activations");
    Tensor t = k.value.detach();
    if (k.requires_grad) t.set_requires_grad(true);
    return t;
  }

  void recompute() {
    DeviceGenerator& gen = device_generator(device);
    const Generator now = gen.get_state();
    struct Restore {   // generator and flag restored even when the re-run throws (OOM)
      DeviceGenerator& gen;
      Generator state;
      ~Restore() { gen.set_state(state); --t_recomputing; }
    } restore{gen, now};
    ++t_recomputing;
    gen.set_state(rng);
    GradModeGuard grad(true);
    AutocastGuard amp(autocast);   // its own cast cache: weights are cast again, as torch's re-run does
    std::vector<Tensor> got;
    {
      SavedTensorHooksGuard hooks({[&got](const Tensor& t) {
                                     got.push_back(t);
                                     return std::shared_ptr<void>();
                                   },
                                   [](const std::shared_ptr<void>&) -> Tensor {
                                     throw AutogradError("checkpoint: a re-run's graph was used for backward");
                                   }});
      Tensor x = fresh(input, "input");
      for (size_t i = 0; i < steps.size(); ++i) {
        std::vector<Tensor> side;
        side.reserve(steps[i].side.size());
        for (const Kept& k : steps[i].side) side.push_back(fresh(k, "side input"));
        x = steps[i].replay(x, side);
      }
    }   // the re-run's own graph and outputs are dropped here; `got` keeps what was saved
    OOMLAB_CHECK_T(AutogradError, int64_t(got.size()) == saves, "checkpoint '", name, "': the re-run saved ",
                   got.size(), " tensors but the forward saved ", saves,
                   ": the segment does not compute the same ops twice (data-dependent control flow?)");
    values = std::move(got);
    recomputed = true;
    ++t_counters.recomputes;
  }

  Tensor take(int64_t i) {
    if (!recomputed) recompute();
    OOMLAB_CHECK_T(AutogradError, i >= 0 && i < int64_t(values.size()) && values[size_t(i)].defined(),
                   "checkpoint '", name,
                   "': Trying to backward through the graph a second time: its recomputed activations were "
                   "already used and freed");
    return std::exchange(values[size_t(i)], Tensor());
  }
};

namespace {
struct Handle {
  std::shared_ptr<CheckpointFrame> frame;
  int64_t index;
};
}  // namespace

struct CheckpointSegment::HooksHolder {
  std::optional<SavedTensorHooksGuard> guard;
};

CheckpointSegment::CheckpointSegment(std::string name, const Tensor& input)
    : frame_(std::make_shared<CheckpointFrame>()), hooks_(std::make_unique<HooksHolder>()) {
  OOMLAB_CHECK_T(AutogradError, input.defined(), "checkpoint '", name, "': undefined input");
  OOMLAB_CHECK_T(AutogradError, t_recomputing == 0, "checkpoint '", name,
                 "': a segment cannot be opened while another is being recomputed (nested checkpoints)");
  frame_->name = std::move(name);
  frame_->device = input.device();
  frame_->rng = device_generator(frame_->device).get_state();
  frame_->autocast = autocast_dtype();
  frame_->input = keep(input);
  ++t_counters.segments;
  std::weak_ptr<CheckpointFrame> weak = frame_;   // the hooks must not keep the frame alive
  hooks_->guard.emplace(SavedTensorHooks{
      [weak](const Tensor&) -> std::shared_ptr<void> {
        auto f = weak.lock();
        if (f->saves == 0) ++t_counters.segments_with_saves;
        ++t_counters.saved_tensors;
        return std::make_shared<Handle>(Handle{f, f->saves++});
      },
      [](const std::shared_ptr<void>& p) -> Tensor {
        const auto* h = static_cast<const Handle*>(p.get());
        return h->frame->take(h->index);
      }});
}

CheckpointSegment::~CheckpointSegment() = default;

void CheckpointSegment::add_step(std::vector<Tensor> side, CheckpointReplayFn replay) {
  CheckpointFrame::Step s;
  s.side.reserve(side.size());
  for (const Tensor& t : side) s.side.push_back(keep(t));
  s.replay = std::move(replay);
  frame_->steps.push_back(std::move(s));
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x, const std::string& name) {
  if (!grad_enabled()) return fn(x);   // nothing is saved without grad: nothing to checkpoint
  CheckpointSegment seg(name, x);
  seg.add_step({}, [fn](const Tensor& in, const std::vector<Tensor>&) { return fn(in); });
  return fn(x);
}

bool checkpoint_recomputing() { return t_recomputing > 0; }
CheckpointCounters checkpoint_counters() { return t_counters; }
void reset_checkpoint_counters() { t_counters = {}; }

}  // namespace oomlab
