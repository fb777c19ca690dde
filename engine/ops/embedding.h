// embedding.h — embedding(weight [V, H], ids int64 [...], padding_idx) -> [..., H], as
// torch.nn.functional.embedding: a row gather. Backward (weight only; ids are not
// differentiable) is a scatter-add of the output gradient into the rows of the ids
// (repeated ids accumulate; rows == padding_idx get no gradient); saves the ids only.
// padding_idx < 0 means none (PyTorch's None; not wrapped); ids are range-checked on cpu
// (ValueError naming the id). Kernels: kernels/embedding.h.
#pragma once
#include "engine/core/tensor.h"

namespace oomlab {

Tensor embedding(const Tensor& weight, const Tensor& ids, int64_t padding_idx = -1);

}  // namespace oomlab
