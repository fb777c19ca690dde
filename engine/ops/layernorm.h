// layernorm.h — layer_norm(x [..., H], weight [H], bias [H], eps) over the last dim, as
// torch.nn.functional.layer_norm with normalized_shape = [H] (biased variance); weight /
// bias may be undefined (elementwise_affine = false). Saves x, weight, mean and rstd
// ([rows]; float32 for half inputs, else x's dtype), as PyTorch's native_layer_norm.
// Errors: ShapeError / DTypeError / DeviceError naming the op and the shapes. Kernels:
// kernels/layernorm.h.
#pragma once
#include "engine/core/tensor.h"

namespace oomlab {

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-12);

}  // namespace oomlab
