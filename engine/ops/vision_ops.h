// vision_ops.h — the ops a UNet needs, as torch.nn.functional (NCHW):
//   upsample2x(x, mode "nearest" | "bilinear") -> [N, C, 2H, 2W]; bilinear uses
//     align_corners=false (PyTorch's default); saves only shapes.
//   conv_transpose2d: engine/ops/conv.h (included here).
//   sigmoid(x); saves its output.
//   pixel_cross_entropy(logits [N, C, H, W], target int64 [N, H, W]) -> scalar mean over
//     pixels (ignore_index -100 skipped), = nll over log_softmax along C; saves the
//     log-probabilities and the target.
#pragma once
#include <string>

#include "engine/core/dispatch.h"
#include "engine/core/tensor.h"
#include "engine/ops/conv.h"

namespace oomlab {

Tensor upsample2x(const Tensor& x, const std::string& mode = "nearest");
Tensor sigmoid(const Tensor& x);
Tensor pixel_cross_entropy(const Tensor& logits, const Tensor& target);

}  // namespace oomlab
