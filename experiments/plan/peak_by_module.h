// peak_by_module.h — who holds a training step's peak: every block of device memory live at
// the moment the step's allocated bytes peak, attributed to a module path and a category
// (`oomlab estimate --by-module`; PyTorch's nearest is torch.distributed._tools.MemTracker).
// Contracts:
//  * PeakByModuleRecorder (a step strategy) takes the allocator's live blocks where the
//    step's memory window opens and records its trace; finish() after the step replays the
//    trace to the moment allocated bytes first reach their maximum and returns the live set
//    there. The rows' totals sum to that maximum, which must equal the step's own peak
//    (StepMemory::step_peak: a lost trace event is an InternalError, never a wrong table).
//  * A block live at the peak and still live, unfreed, at the step's end is looked up among
//    the tensors the caller names (OwnedTensors): parameters, buffers, gradients, optimizer
//    state, inputs, under the module that owns them ("layer1.0.conv1.weight" belongs to
//    "layer1.0.conv1"; a root parameter to the root's label). Every other block goes by the
//    memory context it was allocated under ("layer/phase", engine/memory/caching_allocator.h):
//    a forward's or recompute's are activations, a backward's are backward (gradients of
//    activations, workspaces), the rest other, each under that layer.
//  * Rows are sorted by total, largest first (ties by module name).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/tensor.h"
#include "engine/memory/caching_allocator.h"
#include "engine/train/train_step.h"

namespace oomlab {

inline const std::vector<std::string>& peak_categories() {
  static const std::vector<std::string> c = {"parameters", "buffers", "gradients", "optimizer_state",
                                             "inputs", "activations", "backward", "other"};
  return c;
}

struct ModulePeakBytes {
  std::string module;
  std::map<std::string, int64_t> bytes;   // category -> bytes, every category of peak_categories()
  int64_t total = 0;
};

struct PeakByModule {
  int64_t peak_allocated_bytes = 0;
  std::string peak_frame;   // the memory context of the allocation that reached the peak
  std::vector<ModulePeakBytes> modules;
  nlohmann::json to_json() const;
  std::string table(size_t top) const;   // the `top` largest rows as text, one per line, and the rest summed
};

// The tensors that outlive a step, by the storage they hold: category and owning module.
class OwnedTensors {
 public:
  explicit OwnedTensors(std::string root_label) : root_(std::move(root_label)) {}
  // name: a parameter's, buffer's or optimizer-state tensor's dotted name; the owner is
  // the name less its last component (state "state.<param>.<kind>": the param's owner).
  void add(const std::string& category, const std::string& name, const Tensor& t);
  void add_module(const std::string& category, const std::string& module, const Tensor& t);
  const std::pair<std::string, std::string>* find(uint64_t addr) const;   // (category, module)
  std::string owner_of(const std::string& name) const;
 private:
  std::string root_;
  std::map<uint64_t, std::pair<std::string, std::string>> by_addr_;
};

// A step strategy, first in the step's list: inert until arm(); then, at the first
// micro-batch's forward (right after zero_grad, where TrainStep's memory window starts) it
// takes the allocator's live blocks and the trace's length, and finish() replays the trace
// from there. The allocator records history from arm() on (and stops when this recorder
// goes, if it started it).
class PeakByModuleRecorder : public StepStrategy {
 public:
  explicit PeakByModuleRecorder(CachingAllocator& al) : al_(al) {}
  ~PeakByModuleRecorder() override;
  PeakByModuleRecorder(const PeakByModuleRecorder&) = delete;
  PeakByModuleRecorder& operator=(const PeakByModuleRecorder&) = delete;
  const char* name() const override { return "peak-by-module"; }
  void arm();
  void before_forward(int64_t micro, int64_t micro_count) override;
  // expected_peak: the step's own (StepMemory::step_peak); the replay must reach it.
  PeakByModule finish(const OwnedTensors& owned, int64_t expected_peak) const;
 private:
  struct Live { size_t size = 0; std::string frame; };
  CachingAllocator& al_;
  bool armed_ = false, marked_ = false, owns_trace_ = false;
  std::map<uint64_t, Live> at_start_;
  size_t first_event_ = 0;   // the window's first event in al_.trace()
  int64_t start_bytes_ = 0;
};

}  // namespace oomlab
