// saved_tensor.cpp — saved tensors with version checks and pack/unpack hooks.
#include "engine/autograd/saved_tensor.h"

#include <vector>

#include "engine/core/error.h"

namespace oomlab {
namespace { thread_local std::vector<SavedTensorHooks> g_hooks; }

SavedTensorHooksGuard::SavedTensorHooksGuard(SavedTensorHooks hooks) { g_hooks.push_back(std::move(hooks)); }
SavedTensorHooksGuard::~SavedTensorHooksGuard() { g_hooks.pop_back(); }

SavedTensor::SavedTensor(const Tensor& t, const char* op) : op_(op) {
  if (!t.defined()) return;
  defined_ = true;
  version_ = t.version();
  if (!g_hooks.empty()) {
    const SavedTensorHooks& h = g_hooks.back();
    packed_ = h.pack(t.detach());
    unpack_fn_ = h.unpack;
  } else {
    tensor_ = t.detach();
  }
}

Tensor SavedTensor::unpack() const {
  if (!defined_) return Tensor();
  if (unpack_fn_) return unpack_fn_(packed_);
  if (!tensor_.defined())
    throw AutogradError(str_cat("Trying to backward through the graph a second time (op '", op_,
                                "'): its saved tensors were already freed"));
  if (tensor_.version() != version_)
    throw AutogradError(str_cat(
        "one of the variables needed for gradient computation has been modified by an inplace "
        "operation: the ", tensor_.str(), " saved by op '", op_, "' is at version ",
        tensor_.version(), "; expected version ", version_, " instead"));
  return tensor_;
}


}  // namespace oomlab
