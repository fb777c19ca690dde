// vision_ops.h — the ops a UNet needs, as torch.nn.functional (NCHW):
//   upsample2x(x, mode "nearest" | "bilinear") -> [N, C, 2H, 2W]; bilinear uses
//     align_corners=false (PyTorch's default); saves only shapes.
//   conv_transpose2d: engine/ops/conv.h; sigmoid: engine/ops/activation.h;
//     pixel_cross_entropy: engine/ops/loss.h (all included here).
#pragma once
#include <string>

#include "engine/core/dispatch.h"
#include "engine/core/tensor.h"
#include "engine/ops/activation.h"
#include "engine/ops/conv.h"
#include "engine/ops/loss.h"

namespace oomlab {

Tensor upsample2x(const Tensor& x, const std::string& mode = "nearest");

}  // namespace oomlab
