// saved_tensor.h — what a backward closure keeps of a forward tensor.
// Contracts:
//  * SavedTensor holds a detached view (no grad_fn), so saving an op's own output never
//    forms a reference cycle; the storage stays alive until the node has run.
//  * The storage's version is recorded at save time; unpack() throws AutogradError
//    (PyTorch's message) if an in-place op modified it since.
//  * Saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks): when a hook pair is
//    installed on this thread, save() calls pack() and keeps only its handle; unpack()
//    calls unpack(handle). Checkpointing and offload build on this.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "engine/core/tensor.h"

namespace oomlab {

struct SavedTensorHooks {
  std::function<std::shared_ptr<void>(const Tensor&)> pack;
  std::function<Tensor(const std::shared_ptr<void>&)> unpack;
};

// RAII: installs hooks for saves made on this thread while alive (nests).
class SavedTensorHooksGuard {
 public:
  explicit SavedTensorHooksGuard(SavedTensorHooks hooks);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;
};

class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, const char* op);   // t may be undefined
  Tensor unpack() const;
  bool defined() const { return defined_; }

 private:
  bool defined_ = false;
  Tensor tensor_;                          // when no hooks
  std::shared_ptr<void> packed_;           // when hooks
  std::function<Tensor(const std::shared_ptr<void>&)> unpack_fn_;
  uint64_t version_ = 0;
  const char* op_ = "";
};

}  // namespace oomlab
