// activation.h — relu, in-place relu_, sigmoid, gelu, silu, hardswish and hardsigmoid, as
// torch.nn.functional.
// Saved for backward: relu saves its output (y > 0 is the mask); relu_ modifies x in
// place (bumps its version) and saves the result — the same memory, so no extra
// activation is kept (the source's "in-place ReLU saves one activation"); sigmoid saves
// its output (dx = dy * (1 - y) * y); gelu, silu, hardswish and hardsigmoid save their input
// x (as PyTorch's GeluBackward, SiluBackward, HardswishBackward, HardsigmoidBackward).
// gelu's approximate is "none" (erf form, x * Phi(x)) or "tanh"; anything else is a
// ValueError. Kernels: kernels/activation.h.
#pragma once
#include <string>

#include "engine/core/tensor.h"

namespace oomlab {

Tensor relu(const Tensor& x);
Tensor relu_(Tensor& x);   // in place; returns x (now with a relu grad_fn)
// relu_ for a tensor whose values the kernel that wrote them already rectified (conv2d_relu's
// bias pass): relu_'s checks, version bump, saved result and backward node, no kernel (relu
// is idempotent, so the result is relu_'s). Callers guarantee x holds relu's values.
Tensor relu_rectified_(Tensor& x);
// a = relu(a + b) in place, in one kernel pass (the residual add and the relu after it,
// --fuse-relu): bit-identical to add_(a, b) then relu_(a), with the same saved result and
// backward (relu's dx, handed to both inputs). a contiguous; b the same shape (under
// autocast cast to a's dtype, as add_).
Tensor& add_relu_(Tensor& a, const Tensor& b);
Tensor sigmoid(const Tensor& x);
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor silu(const Tensor& x);          // x * sigmoid(x)
Tensor hardswish(const Tensor& x);     // x * relu6(x + 3) / 6
Tensor hardsigmoid(const Tensor& x);   // relu6(x + 3) / 6

}  // namespace oomlab
