// layout.h — memory-format helpers for code that walks tensors in memory order (the
// elementwise and activation ops, the autograd engine's gradient sums): a dense input keeps
// its format (contiguous or channels_last, engine/core/tensor.h) and the output is laid out
// like it (PyTorch's TensorIterator on dense operands); a second operand or a gradient is
// laid out like the first. Anything else is copied to contiguous, as before formats existed.
// contiguous(format) is autograd-aware; the autograd engine calls these with grad mode off.
#pragma once
#include "engine/core/tensor.h"

namespace oomlab {

// t itself when dense, else a contiguous copy (autograd-aware).
inline Tensor dense(const Tensor& t) { return t.is_dense() ? t : t.contiguous(); }

// t laid out like the dense tensor ref: t itself when it already is, else a copy.
inline Tensor laid_out_like(const Tensor& t, const Tensor& ref) {
  const MemoryFormat f = ref.memory_format();
  return t.is_contiguous(f) ? t : t.contiguous(f);
}

}  // namespace oomlab
