// module_hooks.h — thread-local hooks around every module call (PyTorch's forward pre-hooks
// and forward hooks, reduced to what parameter sharding needs): before(module) runs before
// its forward, after(module, output) after it and may return a replacement output (an
// alias with a grad_fn of its own, e.g. a pre-backward hook). ZeRO stage 3 installs them to
// gather a module's parameters for its forward and free them afterwards.
// Contracts: hooks apply to calls on the installing thread while the guard lives; guards
// nest (the innermost hooks run); with none installed Module::operator() pays one branch.
#pragma once
#include <functional>

#include "engine/core/tensor.h"

namespace oomlab::nn {
class Module;

struct ModuleCallHooks {
  std::function<void(Module& module)> before;
  std::function<Tensor(Module& module, const Tensor& output)> after;
};

class ModuleCallHooksGuard {
 public:
  explicit ModuleCallHooksGuard(ModuleCallHooks hooks);
  ~ModuleCallHooksGuard();
  ModuleCallHooksGuard(const ModuleCallHooksGuard&) = delete;
  ModuleCallHooksGuard& operator=(const ModuleCallHooksGuard&) = delete;

 private:
  const ModuleCallHooks* previous_;
  ModuleCallHooks hooks_;
};

const ModuleCallHooks* module_call_hooks();   // the innermost installed on this thread, or nullptr

}  // namespace oomlab::nn
