// conv.h — conv2d (NCHW, weights [K, C/groups, R, S]) with stride, padding, dilation and
// groups, and conv_transpose2d (weights [C, K/groups, R, S], stride, padding,
// output_padding, groups, no dilation), as torch.nn.functional.
// conv2d output [N, K, P, Q], P = (H + 2*pad_h - dil_h*(R-1) - 1) / stride_h + 1;
// conv_transpose2d output [N, K, (H-1)*stride - 2*pad + R + output_padding, ...].
// Saved for backward (both): x (only if the weight needs grad) and the weight (only if x
// needs grad); the bias gradient needs nothing. Errors name the op and the shapes
// (ShapeError; ValueError for bad parameters). Kernels: kernels/conv.h (conv2d's tables
// serve both ops); CPU kernels may use private scratch (im2col panels), not device memory.
#pragma once
#include "engine/core/tensor.h"
#include "kernels/conv.h"   // Conv2dParams

namespace oomlab {

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias /* may be undefined */,
              const Conv2dParams& p = {});
Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p);  // validates
// relu_(conv2d(x, w, b, p)) with the relu applied in the bias pass (--fuse-relu's VGG convs):
// one pass over y instead of two, bit-identical, with relu_'s autograd node and saved result,
// so the backward and every allocation are the unfused pair's. Without a bias: conv2d, relu_.
Tensor conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p = {});

struct ConvTranspose2dParams { int64_t stride = 1, padding = 0, output_padding = 0, groups = 1; };
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose2dParams& p = {});

}  // namespace oomlab
