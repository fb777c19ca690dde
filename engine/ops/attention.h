// attention.h — scaled_dot_product_attention(q [B, NH, Tq, D], k [B, NH, Tk, D],
// v [B, NH, Tk, Dv], key_padding_mask uint8 [B, Tk] (1 = padded) or undefined,
// dropout_p, training) = dropout(masked_softmax(q k^T, mask, 1/sqrt(D))) v -> [B, NH, Tq,
// Dv], as torch.nn.functional.scaled_dot_product_attention; causal masks each query's later
// keys too (is_causal=True, top-left aligned; fused too, on the CPU and CUDA). A composite of bmm
// (linear.h), masked_softmax (softmax.h) and dropout (dropout.h) with no kernels of its
// own, so its memory is the sum of theirs (the seq^2 terms are the softmax output and the
// dropout mask).
// fused_scaled_dot_product_attention: the same function (PyTorch's SDPA semantics, padding
// mask and dropout) in one op, FlashAttention-style (kernels/attention.h): it saves q, k, v
// (contiguous [B*NH, T, D] copies when not already), its output and one log-sum-exp per
// query row -- never the Tq x Tk probabilities -- and recomputes the scores in backward;
// dropout is replayed from the generator state it reserved, which is the draw eager's
// dropout makes over the [B, NH, Tq, Tk] probabilities, so both give the same mask.
// float16 / bfloat16 inputs compute in float32 (under autocast, as masked_softmax; else
// cast, and the output cast back). Allocation order (identical on meta): forward: the
// contiguous copies if any, out, lse; backward: contiguous(g) if needed, dq, dk, dv.
#pragma once
#include "engine/core/rng.h"
#include "engine/core/tensor.h"

namespace oomlab {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& key_padding_mask, double dropout_p, bool training,
                                    Generator* gen = nullptr, bool causal = false);
inline Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& key_padding_mask, double dropout_p, bool training,
                                           Generator& gen) {
  return scaled_dot_product_attention(q, k, v, key_padding_mask, dropout_p, training, &gen);
}

Tensor fused_scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& key_padding_mask, double dropout_p, bool training,
                                          Generator* gen = nullptr, bool causal = false);

}  // namespace oomlab
