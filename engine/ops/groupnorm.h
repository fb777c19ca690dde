// groupnorm.h — group_norm(x [N, C, *], G, weight [C], bias [C], eps), as
// torch.nn.functional.group_norm (Wu & He 2018): per sample, the C channels are split into
// G groups of C/G and each group is normalised over its channels and positions (biased
// variance), then scaled and shifted per channel. Statistics never mix samples, so the
// result does not depend on the batch size (GroupNorm's point against BatchNorm with small
// or accumulated micro-batches). weight / bias may be undefined. Saves x, weight, mean and
// rstd ([N, G]; float32 for 16-bit x). Under autocast: float32 (policy "group_norm").
// Errors: ShapeError / DTypeError / DeviceError / ValueError naming the op, the shapes
// and G. Kernels: kernels/groupnorm.h.
#pragma once
#include <cstdint>

#include "engine/core/tensor.h"

namespace oomlab {

Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

}  // namespace oomlab
