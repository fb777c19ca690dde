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

// A token batch's per-batch index tensors for ids int64 [B, T] (0 = padding), made on the
// ids' device by one kernel (no host round trip: a CUDA graph can capture it), allocated in
// this order: positions (int64 [B, T], 0..T-1 per row) and token types (int64 zeros) when
// `positions_and_types`, then the padding mask (uint8, 1 where the id is 0) when `padding`.
// No autograd.
struct TokenInputs { Tensor positions, types, padding; };
TokenInputs token_inputs(const Tensor& ids, bool positions_and_types, bool padding);

}  // namespace oomlab
