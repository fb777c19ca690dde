// vision_ops.h — the ops a UNet needs, as torch.nn.functional (NCHW):
//   upsample2x(x, mode "nearest" | "bilinear") -> [N, C, 2H, 2W]; bilinear uses
//     align_corners=false (PyTorch's default); saves only shapes.
//   conv_transpose2d(x [N, C, H, W], weight [C, K/groups, R, S], bias [K], stride,
//     padding, output_padding, groups=1) -> [N, K, (H-1)*stride - 2*pad + R + out_pad,
//     ...]; saves x (if weight needs grad) and weight (if x needs grad).
//   sigmoid(x); saves its output.
//   pixel_cross_entropy(logits [N, C, H, W], target int64 [N, H, W]) -> scalar mean over
//     pixels (ignore_index -100 skipped), = nll over log_softmax along C; saves the
//     log-probabilities and the target.
#pragma once
#include <string>

#include "engine/core/dispatch.h"
#include "engine/core/tensor.h"

namespace oomlab {

Tensor upsample2x(const Tensor& x, const std::string& mode = "nearest");
struct ConvTranspose2dParams { int64_t stride = 1, padding = 0, output_padding = 0, groups = 1; };
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose2dParams& p = {});
Tensor sigmoid(const Tensor& x);
Tensor pixel_cross_entropy(const Tensor& logits, const Tensor& target);

}  // namespace oomlab
