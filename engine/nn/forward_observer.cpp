// forward_observer.cpp — thread-local forward observer.
#include "engine/nn/forward_observer.h"

namespace oomlab::nn {
namespace { thread_local ForwardObserver g_observer; }

ForwardObserverGuard::ForwardObserverGuard(ForwardObserver observer) : previous_(std::move(g_observer)) {
  g_observer = std::move(observer);
}
ForwardObserverGuard::~ForwardObserverGuard() { g_observer = std::move(previous_); }

void notify_forward(const Module& module, const Tensor& input, const Tensor& output) {
  if (g_observer) g_observer(module, input, output);
}
}  // namespace oomlab::nn
