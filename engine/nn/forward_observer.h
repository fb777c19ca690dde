// forward_observer.h — a thread-local observer called after every module's forward
// (PyTorch's forward hooks, reduced to what `oomlab summary` needs). Module::operator()
// calls notify_forward(); with no observer installed that is one branch.
#pragma once
#include <functional>

#include "engine/core/tensor.h"

namespace oomlab::nn {
class Module;

using ForwardObserver = std::function<void(const Module& module, const Tensor& input, const Tensor& output)>;

class ForwardObserverGuard {
 public:
  explicit ForwardObserverGuard(ForwardObserver observer);
  ~ForwardObserverGuard();
  ForwardObserverGuard(const ForwardObserverGuard&) = delete;
  ForwardObserverGuard& operator=(const ForwardObserverGuard&) = delete;
 private:
  ForwardObserver previous_;
};

void notify_forward(const Module& module, const Tensor& input, const Tensor& output);

}  // namespace oomlab::nn
