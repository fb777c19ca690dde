// upsample.h — upsample2x(x [N, C, H, W], mode "nearest" | "bilinear") -> [N, C, 2H, 2W],
// as F.interpolate(scale_factor=2); bilinear uses align_corners=false (PyTorch's
// default). Saves only shapes (both modes are linear in x). Errors: ShapeError (not 4-D),
// ValueError (unknown mode), DTypeError (not floating). Kernels: kernels/upsample.h.
#pragma once
#include <string>

#include "engine/core/tensor.h"

namespace oomlab {

Tensor upsample2x(const Tensor& x, const std::string& mode = "nearest");

}  // namespace oomlab
