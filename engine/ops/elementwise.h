// elementwise.h — elementwise arithmetic: add, sub, mul (tensor-tensor; shapes that differ
// broadcast, through broadcast.h's broadcast_binary, which states that case's contracts),
// scalar scale/add, in-place add_/mul_, and the sum / mean reductions.
// Backward: add/sub save nothing; mul saves both inputs (only those whose partner
// needs grad); scale saves nothing. Kernels: kernels/elementwise.h.
#pragma once
#include "engine/core/tensor.h"

namespace oomlab {

Tensor add(const Tensor& a, const Tensor& b);            // a + b
Tensor sub(const Tensor& a, const Tensor& b);            // a - b
Tensor mul(const Tensor& a, const Tensor& b);            // a * b
Tensor scale(const Tensor& a, double alpha);             // alpha * a
Tensor add_scalar(const Tensor& a, double beta);         // a + beta
Tensor pow_scalar(const Tensor& x, double exponent);     // x ^ exponent; saves x (PowBackward0)
// In place with autograd (torchvision's residual `out += identity`): a += b, bumps a's
// version and rebases a's history onto an "add_" node; saves nothing.
Tensor& add_(Tensor& a, const Tensor& b);
// The two halves of an in-place op writing a from b with autograd (add_, add_relu_):
// inplace_operand refuses a leaf that requires grad, casts b to a's dtype under autocast
// (the "add_" rule: an in-place op cannot widen) and checks shapes, dtypes, devices and a's
// contiguity, all in `op`'s name; inplace_history is a stand-in for a before the op (its
// old grad_fn), the edge of the node the op then attaches to a.
Tensor inplace_operand(const Tensor& a, const Tensor& b, const char* op);
Tensor inplace_history(const Tensor& a);
// In place, no autograd (used by the engine, optimizers, accumulation): a += alpha * b.
void add_inplace(Tensor& a, const Tensor& b, double alpha = 1.0);
// In place, no autograd: a += value, on the device (also int64: BatchNorm's
// num_batches_tracked counts there without a host round trip).
void add_scalar_inplace(Tensor& a, double value);
Tensor sum_all(const Tensor& a);                         // scalar; backward broadcasts
Tensor mean_all(const Tensor& a);

}  // namespace oomlab
