// softmax.h — softmax and log_softmax over the last dim of a 2-D [N, C] tensor, and the
// attention masked_softmax(x [B, ..., Tk], key_padding_mask uint8 [B, Tk] (1 = padded) or
// undefined, scale): softmax over the last dim of scale * x with padded keys at -inf (a
// row whose keys are all padded gives zeros, not NaN, and so does its gradient; without a
// mask x may have any rank); causal also masks each query's later keys (x [..., Tq, Tk],
// key j > query i at -inf: torch's is_causal, top-left aligned). All max-shifted for stability; each saves its output
// only. Errors: ShapeError / DTypeError / DeviceError naming the op. Kernels: kernels/softmax.h.
#pragma once
#include "engine/core/tensor.h"

namespace oomlab {

Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);
Tensor masked_softmax(const Tensor& x, const Tensor& key_padding_mask, double scale = 1.0, bool causal = false);

}  // namespace oomlab
