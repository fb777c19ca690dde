// broadcast.h — the broadcast family, as PyTorch's broadcasting semantics: shapes are
// right-aligned and each dim must be equal or 1 in one of them (ShapeError naming the op
// and both shapes otherwise).
//   broadcast_binary(op, a, b): a op b (add, sub, mul, div) into a new contiguous tensor
//     of the broadcast shape, inputs read in place through stride-0 dims (no expanded
//     copies). add / sub / mul of elementwise.h come here when their shapes differ; div
//     always does. Saved for backward as PyTorch's nodes: add / sub nothing; mul the
//     partner of each input that needs grad; div both inputs. Each input's gradient is
//     summed back to its own shape (sum_to).
//   sum_to(x, shape): x summed over the dims `shape` broadcasts along (shape must
//     broadcast to x's shape); backward expands.
//   expand(x, shape): a view of x with stride 0 on each broadcast dim (allocates nothing,
//     as torch.Tensor.expand; -1 keeps a dim); backward is sum_to. Kernels needing
//     contiguous input copy it first, as they do any view.
// Dtypes and devices must agree (autocast promotes first, as add's). Kernels: kernels/broadcast.h.
#pragma once
#include "engine/core/tensor.h"
#include "kernels/broadcast.h"

namespace oomlab {

Shape broadcast_shape(const Shape& a, const Shape& b, const char* op);
Tensor broadcast_binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);   // a / b, broadcasting
Tensor sum_to(const Tensor& x, const Shape& shape);
Tensor expand(const Tensor& x, const Shape& shape);

}  // namespace oomlab
