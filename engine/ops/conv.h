// conv.h — 2-D convolution (NCHW, weights [K, C/groups, R, S]) with stride, padding,
// dilation and groups, as torch.nn.functional.conv2d.
// Saved for backward: x (only if the weight needs grad) and w (only if x needs grad);
// the bias gradient needs nothing. Output [N, K, P, Q], P = (H + 2*pad_h - dil_h*(R-1)
// - 1) / stride_h + 1. Errors name the op and the shapes (ShapeError).
// CPU kernels may use private scratch (im2col panels) that is not device memory.
#pragma once
#include "engine/core/dispatch.h"
#include "engine/core/tensor.h"

namespace oomlab {

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1;
};

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias /* may be undefined */,
              const Conv2dParams& p = {});
Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p);  // validates

// ---- kernels ---- (all pointers contiguous NCHW / KCRS)
struct Conv2dArgs {
  int64_t N, C, H, W, K, R, S, P, Q;
  Conv2dParams p;
  const void* x; const void* w; void* y;      // forward: y = conv(x, w)        (no bias)
  const void* dy; void* dx; void* dw;         // backward_data: dx = conv^T(dy, w) (overwrite)
                                              // backward_weight: dw = corr(x, dy) (overwrite)
};
// NCHW bias: y[n,k,:,:] += b[k]; grad: db[k] = sum_{n,p,q} dy[n,k,p,q] (overwrite)
struct ChannelBiasArgs { void* y; const void* b; const void* dy; void* db; int64_t N, K, HW; };
KernelTable<Conv2dArgs>& conv2d_forward_kernels();
KernelTable<Conv2dArgs>& conv2d_backward_data_kernels();
KernelTable<Conv2dArgs>& conv2d_backward_weight_kernels();
KernelTable<ChannelBiasArgs>& channel_bias_add_kernels();
KernelTable<ChannelBiasArgs>& channel_bias_grad_kernels();

}  // namespace oomlab
