// optimizer.h — Optimizer base class (torch.optim.Optimizer's shape), parameter groups,
// and make_optimizer("sgd" | "adam" | "adamw").
// Contracts:
//  * step() runs under NoGradGuard, skips parameters whose grad is undefined, bumps the
//    version of every parameter it updates, and launches one fused kernel per parameter
//    (kernels/optim.h): no temporaries besides the state itself.
//  * State tensors are allocated at a parameter's first update, with Tensor::empty/zeros
//    on the parameter's device and dtype (as PyTorch does), so memory stats show them
//    after step 1 — but for all parameters before any update begins: an
//    OutOfMemoryError while creating state drops what this step created and leaves every
//    parameter (and the step counts) untouched; the updates themselves allocate nothing.
//    On meta the same allocations happen and the arithmetic is skipped.
//  * Checkpoints: state_tensors() (handles sharing the live state, named
//    "state.<param name>.<kind>") + state_json() (step counts, group hyper-parameters,
//    parameter names). load_state() validates everything before changing anything.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/tensor.h"

namespace oomlab {

// Same type as nn::NamedTensors (kept here so optim does not depend on nn).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Hyper-parameters not used by an optimizer are ignored by it (SGD ignores beta1/beta2/eps,
// Adam ignores momentum/dampening/nesterov). Parameter names must be unique.
struct ParamGroup {
  NamedTensors params;
  double lr = 1e-3;
  double momentum = 0, dampening = 0, weight_decay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool nesterov = false;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step();
  void zero_grad(bool set_to_none = true);
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  int64_t step_count() const { return step_count_; }   // number of step() calls
  const std::string& name() const { return name_; }     // "sgd", "adam", "adamw"

  // ---- checkpoint support ----
  // Live state handles in group/parameter order: "state.<name>.momentum_buffer" (SGD with
  // momentum), "state.<name>.exp_avg" and "state.<name>.exp_avg_sq" (Adam/AdamW).
  NamedTensors state_tensors() const;
  // {"optimizer", "step_count", "param_groups": [{hyper-parameters, "params": [names]}],
  //  "state": {name: {"step": n}}}
  nlohmann::json state_json() const;
  // Restores step counts, group hyper-parameters and state tensors (copied into fresh
  // tensors on each parameter's device/dtype). Throws ValueError/ShapeError naming the
  // offending entry (wrong optimizer, group/parameter mismatch, unknown or missing state
  // tensor, shape mismatch); on error the optimizer is unchanged.
  void load_state(const nlohmann::json& state, const NamedTensors& tensors);

 protected:
  struct ParamState {
    int64_t step = 0;                  // updates applied to this parameter
    std::vector<Tensor> tensors;       // indexed like state_kinds(); undefined = absent
    bool fresh = false;                // state created by init_state for the coming update
  };
  Optimizer(std::string name, std::vector<ParamGroup> groups);

  // State kinds this optimizer may hold per parameter, in export order.
  virtual std::vector<std::string> state_kinds() const = 0;
  // Kinds that must be present once a parameter has step > 0 under this group.
  virtual std::vector<std::string> required_state_kinds(const ParamGroup& g) const = 0;
  // Checks a group's hyper-parameters (ValueError naming the group and value).
  virtual void validate_group(const ParamGroup& g, size_t index) const;
  // Creates the state the coming update of `param` needs and does not have yet (marking
  // s.fresh when it did); the only place an optimizer allocates.
  virtual void init_state(const ParamGroup& g, const Tensor& param, ParamState& s) = 0;
  // One parameter's update as step() hands it over: s.step already incremented.
  struct UpdateItem { Tensor* param; const Tensor* grad; ParamState* state; };
  // Updates the parameters of group g in place (all of one device and dtype, in group
  // order), as torch.optim's foreach form: one kernel-table launch for the list
  // (kernels/optim.h). Allocates nothing.
  virtual void update_group(const ParamGroup& g, const std::vector<UpdateItem>& items) = 0;

 private:
  // load_state's parts: the JSON (groups' hyper-parameters, per-parameter steps), the state
  // tensors matched to (parameter, kind) with the required kinds checked, then the commit.
  struct LoadedJson {
    std::vector<ParamGroup> groups;
    std::unordered_map<std::string, int64_t> steps;   // parameters with step > 0
    int64_t step_count = 0;
  };
  using GivenTensors = std::unordered_map<std::string, std::vector<const Tensor*>>;   // name -> by kind
  std::unordered_map<std::string, const Tensor*> parameter_index() const;
  LoadedJson parse_state_json(const nlohmann::json& j, const std::string& ctx) const;
  void load_group_json(const nlohmann::json& gj, size_t gi, ParamGroup& ng, const std::string& ctx) const;
  GivenTensors match_state_tensors(const NamedTensors& tensors, const LoadedJson& loaded, const std::string& ctx) const;
  void commit_state(LoadedJson loaded, const GivenTensors& given);

  std::string name_;
  std::vector<ParamGroup> groups_;
  std::unordered_map<std::string, ParamState> state_;
  int64_t step_count_ = 0;
};

// name: "sgd" | "adam" | "adamw" (case-sensitive); anything else -> ValueError.
std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<ParamGroup> groups);

// Implementations (sgd.cpp, adam.cpp); make_optimizer is the usual entry point.
std::unique_ptr<Optimizer> make_sgd(std::vector<ParamGroup> groups);
std::unique_ptr<Optimizer> make_adam(std::vector<ParamGroup> groups, bool decoupled_weight_decay);

}  // namespace oomlab
