// transformer_ops.h — the ops a BERT-style encoder needs, as torch.nn.functional:
//   embedding(weight [V, H], ids int64 [...]) -> [..., H]; backward = scatter-add of the
//     output grad into the rows of the ids (rows == padding_idx get no gradient);
//     saves the ids. padding_idx < 0 means none (PyTorch's None; not wrapped); ids are
//     range-checked on cpu (ValueError naming the id).
//   layer_norm(x [..., H], weight [H], bias [H], eps) over the last dim; saves x, weight,
//     mean and rstd ([rows], fp32 or f64).
//   gelu: engine/ops/activation.h; bmm: engine/ops/linear.h; masked_softmax:
//     engine/ops/softmax.h; cat, split, chunk: engine/ops/concat.h (all included here).
//   scaled_dot_product_attention(q, k, v [B, NH, T, D], key_padding_mask, dropout_p,
//     training) = dropout(masked_softmax(q k^T, mask, 1/sqrt(D))) v, built from the ops
//     above so its memory is the sum of theirs (the seq^2 terms are the softmax output
//     and the dropout mask).
#pragma once
#include <string>
#include <vector>

#include "engine/core/dispatch.h"
#include "engine/core/rng.h"
#include "engine/core/tensor.h"
#include "engine/ops/activation.h"
#include "engine/ops/concat.h"
#include "engine/ops/linear.h"
#include "engine/ops/softmax.h"

namespace oomlab {

Tensor embedding(const Tensor& weight, const Tensor& ids, int64_t padding_idx = -1);
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-12);
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& key_padding_mask, double dropout_p, bool training,
                                    Generator& gen = default_generator());

}  // namespace oomlab
