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
// dtypes as PyTorch's SDPA: under autocast q, k, v are cast to the autocast dtype (float32
// ones; autocast policy "lower"); float16 / bfloat16 q, k, v and the output are saved in
// their 16 bits, the log-sum-exp in float32, and the kernels compute in float32 on copies
// made for the call (freed after it), the output and the gradients cast back.
// Allocation order (identical on meta): forward: the autocast casts and contiguous copies if
// any, the float32 copies (16-bit inputs), out (float32), lse, the 16-bit output; backward:
// contiguous(g) if needed, the float32 copies, dq, dk, dv, their 16-bit casts.
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
