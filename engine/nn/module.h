// module.h — nn::Module: a named tree of parameters, buffers and submodules
// (torch.nn.Module's shape). Contracts:
//  * operator()(x) runs forward under MemoryContext(full module name, "fwd") so every
//    allocation and autograd node is labelled with the layer that made it. A forward that
//    throws clears the side inputs of the whole subtree (they may hold the graph built
//    so far), so an abandoned step leaves nothing allocated behind.
//  * Parameter/buffer names are dotted paths identical to PyTorch's state_dict keys
//    ("features.0.weight", "layer1.0.bn1.running_mean"), so safetensors files interoperate.
//  * Parameters are leaf tensors with requires_grad; buffers never require grad.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"

namespace oomlab::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  virtual const char* type_name() const = 0;      // "Conv2d", "BatchNorm2d", "ResNet" ...
  Tensor operator()(const Tensor& x);

  NamedTensors named_parameters() const;           // recursive, registration order
  NamedTensors named_buffers() const;              // recursive
  // Parameters and buffers in PyTorch's state_dict order (per module: params, buffers).
  NamedTensors state_dict() const;
  // Copies values in place (dtype conversion allowed); strict: keys must match exactly.
  void load_state_dict(const NamedTensors& state, bool strict = true);
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Module*>> named_modules();   // pre-order, "" = this
  std::vector<std::pair<std::string, Module*>> named_children();
  Module* submodule(const std::string& dotted_path);              // "" = this; throws ValueError
  int64_t num_parameters() const;
  bool is_leaf_module() const { return children_.empty(); }

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad(bool set_to_none = true);
  const std::string& full_name() const { return full_name_; }   // set by register_module
  // The name its allocations are labelled with: full_name(), or type_name() for the root.
  std::string memory_label() const { return full_name_.empty() ? std::string(type_name()) : full_name_; }

  // Activation checkpointing (engine/nn/checkpoint_plan.h): where this module sits in a
  // planned segment; segment < 0: not checkpointed. operator() runs a planned module
  // through the segment runner when grad is on.
  struct CheckpointRole { int64_t segment = -1; bool first = false, last = false; };
  void set_checkpoint_role(const CheckpointRole& role) { checkpoint_role_ = role; }
  const CheckpointRole& checkpoint_role() const { return checkpoint_role_; }
  // Member tensors forward reads besides x, set by the parent before the call (a residual,
  // an attention mask, key/value): checkpointing keeps them and sets them again for the
  // re-run. Default: none.
  virtual std::vector<Tensor*> side_inputs() { return {}; }
  // True when forward modifies x in place (ReLU(inplace=True)): no segment starts here,
  // since its kept input would be changed before the re-run.
  virtual bool modifies_input() const { return false; }

 protected:
  // Return handles sharing the registered impl (Tensor is a shared handle).
  Tensor register_parameter(const std::string& name, Tensor t);    // sets requires_grad, name
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M> std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  Tensor param(const std::string& name) const;
  Tensor buffer(const std::string& name) const;

 private:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  void collect(NamedTensors& out, const std::string& prefix, bool params, bool buffers) const;
  void set_prefix(const std::string& prefix);
  std::vector<std::pair<std::string, Tensor>> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
  std::string full_name_;
  CheckpointRole checkpoint_role_;
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace oomlab::nn
