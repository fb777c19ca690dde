// conv.h — kernel argument structs and tables of the conv family (engine/ops/conv.h:
// conv2d, and conv_transpose2d, which runs conv2d's kernels with the roles of x and dy
// swapped): 2-D convolution forward / backward data / backward weight and the NCHW
// channel-bias add / grad. All pointers are contiguous NCHW / KCRS, or with `channels_last`
// NHWC / KRSC (torch.channels_last: x, w, y, dy, dx, dw all in it); backward kernels
// overwrite their output. The bias kernels take NHWC as [N*H*W, K, 1]. CPU kernels:
// kernels/cpu/conv_cpu.cpp (+ im2col_cpu.h, conv_direct_cpu.cpp, conv_taps_cpu.cpp, conv_nhwc_cpu.cpp) and
// channel_bias_cpu.cpp;
// CUDA: kernels/cuda/conv.cu (cuDNN) and conv_bias.cu.
#pragma once
#include <string_view>
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1;
};

// The CPU kernels' path for a call, as cuDNN's algorithm choice is for CUDA (which ignores
// this): by_shape takes the measured rule (kernels/cpu/conv_cpu.cpp); im2col forces im2col +
// GEMM; taps forces the tap GEMMs where their structure allows (kernels/cpu/conv_taps_cpu.h),
// else the rule. For bench_conv's A/B runs of the rule and the tests of each path.
enum class CpuConvPath : uint8_t { by_shape, im2col, taps };

struct Conv2dArgs {
  int64_t N, C, H, W, K, R, S, P, Q;
  Conv2dParams p;
  const void* x; const void* w; void* y;      // forward: y = conv(x, w)        (no bias)
  const void* dy; void* dx; void* dw;         // backward_data: dx = conv^T(dy, w) (overwrite)
                                              // backward_weight: dw = corr(x, dy) (overwrite)
  bool channels_last = false;                 // NHWC / KRSC buffers (--channels-last)
  CpuConvPath cpu_path = CpuConvPath::by_shape;
};
// flop_counter.h: forward, backward-data and backward-weight each do 2 N K P Q (C / groups) R S.
inline double kernel_flops(const Conv2dArgs& a, std::string_view) {
  return 2.0 * double(a.N) * double(a.K) * double(a.P) * double(a.Q) * double(a.C / a.p.groups) * double(a.R) *
         double(a.S);
}
inline MatrixKind kernel_matrix_kind(const Conv2dArgs& a) {
  return a.channels_last ? MatrixKind::conv_channels_last : MatrixKind::conv;
}
// NCHW bias: y[n,k,:,:] += b[k]; grad: db[k] = sum_{n,p,q} dy[n,k,p,q] (overwrite).
// channels_last: y / dy are [N*P*Q, K] rows, passed as N = N*P*Q, HW = 1 (kernels may walk
// them row by row).
// relu (channel_bias_add only; conv2d_relu, --fuse-relu): y = relu(y + b[k]) in the same pass,
// bit-identical to the add then relu (relu commutes with rounding; NaN propagates as relu's).
struct ChannelBiasArgs {
  void* y; const void* b; const void* dy; void* db; int64_t N, K, HW;
  bool channels_last = false;
  bool relu = false;
};

OOMLAB_KERNEL_TABLE(conv2d_forward, Conv2dArgs, "conv2d_forward")
OOMLAB_KERNEL_TABLE(conv2d_backward_data, Conv2dArgs, "conv2d_backward_data")
OOMLAB_KERNEL_TABLE(conv2d_backward_weight, Conv2dArgs, "conv2d_backward_weight")
OOMLAB_KERNEL_TABLE(channel_bias_add, ChannelBiasArgs, "channel_bias_add")
OOMLAB_KERNEL_TABLE(channel_bias_grad, ChannelBiasArgs, "channel_bias_grad")

}  // namespace oomlab
