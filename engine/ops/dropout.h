// dropout.h — dropout(x, p, training, generator), as torch.nn.functional.dropout.
// Masks come from the generator of x's device (rng.h: per logical device, reserved
// atomically), or from `gen` when given: element i of a call keeps iff
// uniform(seed, base, i) >= p, scaled by 1/(1-p); independent of threads and device
// (kernels/dropout.h). Saved for backward: the uint8 keep-mask (1 byte/element, as
// PyTorch's bool mask). training=false or p=0 returns x itself (no allocation); p=1
// returns zeros; p outside [0, 1] is a ValueError.
#pragma once
#include "engine/core/rng.h"
#include "engine/core/tensor.h"

namespace oomlab {

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);
inline Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) {
  return dropout(x, p, training, &gen);
}

}  // namespace oomlab
