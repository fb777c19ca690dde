// conv.cpp — conv2d (NCHW or channels_last) and conv_transpose2d (NCHW) with autograd, on the conv2d_* and
// channel_bias_* tables of kernels/conv.h. conv_transpose2d has no kernels of its own: it
// is the adjoint of conv2d(z [N, K, Ho, Wo], weight) -> [N, C, H, W], so
//   forward y = conv2d_backward_data(dy := x, w); grad x dx = conv2d_forward(x := g, w);
//   grad weight dw = conv2d_backward_weight(x := g, dy := x); bias via channel_bias_*.
// Saved for backward: x only if the weight needs grad, w only if x needs grad; the bias
// gradient needs nothing. Allocation order (identical on meta): forward: contiguous
// copies of x/w(/b) if needed, y; backward: contiguous(g) if needed, dx, dw, db.
// conv2d runs channels_last (NHWC activations, KRSC weights) when its input or weight is
// (torch's rule), with the output and gradients in it; the other operand is copied to it.
// Errors: ShapeError naming the op and the input and weight shapes; ValueError for bad
// stride/padding/dilation/output_padding/groups.
#include "engine/ops/conv.h"

#include "engine/autograd/autocast.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/ops/activation.h"
#include "kernels/conv.h"

namespace oomlab {

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  OOMLAB_CHECK_T(ShapeError, x.size() == 4 && w.size() == 4,
                 "conv2d: expected 4-D input [N, C, H, W] and 4-D weight [K, C/groups, R, S], got input ",
                 shape_str(x), " and weight ", shape_str(w));
  OOMLAB_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.dil_h >= 1 && p.dil_w >= 1 &&
                   p.pad_h >= 0 && p.pad_w >= 0 && p.groups >= 1,
               "conv2d: invalid parameters stride (", p.stride_h, ", ", p.stride_w, "), padding (",
               p.pad_h, ", ", p.pad_w, "), dilation (", p.dil_h, ", ", p.dil_w, "), groups ", p.groups,
               " for input ", shape_str(x), " and weight ", shape_str(w));
  const int64_t N = x[0], C = x[1], H = x[2], W = x[3], K = w[0], R = w[2], S = w[3];
  OOMLAB_CHECK_T(ShapeError, C % p.groups == 0 && K % p.groups == 0 && w[1] * p.groups == C,
                 "conv2d: input ", shape_str(x), " with groups=", p.groups,
                 " expects weight [K, ", (C % p.groups == 0 ? C / p.groups : C), ", R, S] with K divisible by ",
                 p.groups, ", got weight ", shape_str(w));
  OOMLAB_CHECK_T(ShapeError, R >= 1 && S >= 1, "conv2d: empty kernel in weight ", shape_str(w),
                 " for input ", shape_str(x));
  const int64_t eff_h = p.dil_h * (R - 1) + 1, eff_w = p.dil_w * (S - 1) + 1;
  const int64_t hp = H + 2 * p.pad_h, wp = W + 2 * p.pad_w;
  OOMLAB_CHECK_T(ShapeError, hp >= eff_h && wp >= eff_w, "conv2d: input ", shape_str(x),
                 " (padded ", hp, "x", wp, ") is smaller than the dilated kernel (", eff_h, "x", eff_w,
                 ") of weight ", shape_str(w));
  return {N, K, (hp - eff_h) / p.stride_h + 1, (wp - eff_w) / p.stride_w + 1};
}

namespace {
// PyTorch's cudnn rule: channels_last when the input or the weight is; both are then laid
// out so, and the output and every gradient are too.
MemoryFormat conv_memory_format(const Tensor& x, const Tensor& w) {
  return x.memory_format() == MemoryFormat::channels_last || w.memory_format() == MemoryFormat::channels_last
             ? MemoryFormat::channels_last
             : MemoryFormat::contiguous;
}

// The bias kernels' view of y [N, K, P, Q]: NCHW as [N, K, P*Q], NHWC as [N*P*Q, K, 1].
ChannelBiasArgs bias_args(const Conv2dArgs& a) {
  ChannelBiasArgs b{};
  b.N = a.channels_last ? a.N * a.P * a.Q : a.N;
  b.K = a.K;
  b.HW = a.channels_last ? 1 : a.P * a.Q;
  b.channels_last = a.channels_last;
  return b;
}

BackwardFn conv2d_backward(const SavedTensor& sx, const SavedTensor& sw, const Conv2dArgs& a,
                           const Shape& x_shape, const Shape& w_shape, MemoryFormat f) {
  return [sx, sw, a, x_shape, w_shape, f](const Tensor& g0, const std::vector<bool>& needs) {
    Tensor g = g0.contiguous(f);
    Conv2dArgs k = a;
    k.x = k.w = nullptr; k.y = nullptr;
    k.dy = g.raw_data();
    Tensor gx, gw, gb;
    if (needs[0]) {
      Tensor w = sw.unpack().contiguous(f);   // a saved-tensor hook may have repacked it
      gx = Tensor::empty_format(x_shape, g.dtype(), g.device(), f);
      k.w = w.raw_data(); k.dx = gx.raw_data();
      conv2d_backward_data_kernels().launch(g.device(), g.dtype(), k);
    }
    if (needs[1]) {
      Tensor x = sx.unpack().contiguous(f);
      gw = Tensor::empty_format(w_shape, g.dtype(), g.device(), f);
      k.x = x.raw_data(); k.dw = gw.raw_data();
      conv2d_backward_weight_kernels().launch(g.device(), g.dtype(), k);
    }
    if (needs.size() > 2 && needs[2]) {
      gb = Tensor::empty({a.K}, g.dtype(), g.device());
      ChannelBiasArgs b = bias_args(a);
      b.dy = g.raw_data(); b.db = gb.raw_data();
      channel_bias_grad_kernels().launch(g.device(), g.dtype(), b);
    }
    return std::vector<Tensor>{gx, gw, gb};
  };
}

void check_conv_bias(const Tensor& b0, const Tensor& x0, const Tensor& w0) {
  OOMLAB_CHECK_T(ShapeError, b0.dim() == 1 && b0.size(0) == w0.size(0), "conv2d: bias ",
                 shape_str(b0.shape()), " does not match weight ", shape_str(w0.shape()),
                 " (input ", shape_str(x0.shape()), ")");
  OOMLAB_CHECK_T(DTypeError, b0.dtype() == x0.dtype(), "conv2d: bias dtype ",
                 dtype_name(b0.dtype()), " differs from input dtype ", dtype_name(x0.dtype()));
  OOMLAB_CHECK_T(DeviceError, b0.device() == x0.device(), "conv2d: bias on ", b0.device().str(),
                 " and input on ", x0.device().str());
}
}  // namespace

namespace {
// conv2d, its bias pass applying relu too when `relu` (conv2d_relu; the caller then records
// the relu on the autograd graph).
Tensor conv2d_impl(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const Conv2dParams& p, bool relu) {
  const Tensor x0 = autocast_lower(x_in, "conv2d"), w0 = autocast_lower(w_in, "conv2d"),
               b0 = autocast_lower(b_in, "conv2d");
  const Shape y_shape = conv2d_output_shape(x0.shape(), w0.shape(), p);
  OOMLAB_CHECK_T(DTypeError, x0.dtype() == w0.dtype() && dtype_is_floating(x0.dtype()),
                 "conv2d: input dtype ", dtype_name(x0.dtype()), " and weight dtype ",
                 dtype_name(w0.dtype()), " must be the same floating type");
  OOMLAB_CHECK_T(DeviceError, x0.device() == w0.device(), "conv2d: input on ", x0.device().str(),
                 " and weight on ", w0.device().str());
  const bool has_bias = b0.defined();
  if (has_bias) check_conv_bias(b0, x0, w0);
  const MemoryFormat f = conv_memory_format(x0, w0);
  Tensor x = x0.contiguous(f), w = w0.contiguous(f);
  Tensor b = has_bias ? b0.contiguous() : Tensor();
  Conv2dArgs a{};
  a.N = x.size(0); a.C = x.size(1); a.H = x.size(2); a.W = x.size(3);
  a.K = w.size(0); a.R = w.size(2); a.S = w.size(3); a.P = y_shape[2]; a.Q = y_shape[3];
  a.p = p;
  a.channels_last = f == MemoryFormat::channels_last;
  Tensor y = Tensor::empty_format(y_shape, x.dtype(), x.device(), f);
  a.x = x.raw_data(); a.w = w.raw_data(); a.y = y.raw_data();
  conv2d_forward_kernels().launch(x.device(), x.dtype(), a);
  if (has_bias) {
    ChannelBiasArgs ba = bias_args(a);
    ba.y = y.raw_data(); ba.b = b.raw_data();
    ba.relu = relu;
    channel_bias_add_kernels().launch(y.device(), y.dtype(), ba);
  }
  return attach_grad_fn(y, "conv2d", {x0, w0, b0}, [&]() -> BackwardFn {
    SavedTensor sx(w0.requires_grad() ? x : Tensor(), "conv2d");
    SavedTensor sw(x0.requires_grad() ? w : Tensor(), "conv2d");
    Conv2dArgs k = a;
    k.x = k.w = k.y = nullptr;
    return conv2d_backward(sx, sw, k, x.shape(), w.shape(), f);
  });
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  return conv2d_impl(x, w, b, p, false);
}

Tensor conv2d_relu(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p) {
  if (!b.defined()) {   // no bias pass to fold the relu into
    Tensor y = conv2d_impl(x, w, b, p, false);
    return relu_(y);
  }
  Tensor y = conv2d_impl(x, w, b, p, true);
  return relu_rectified_(y);   // the graph and saved tensors of relu_(conv2d(x, w, b))
}

// ---- conv_transpose2d ------------------------------------------------------------------
namespace {
// The conv2d whose input is the transposed conv's output: Conv2dArgs with
// conv.{C,H,W} = (K, Ho, Wo), conv.{K,P,Q} = (C, H, W).
Conv2dArgs adjoint_conv_args(const Shape& x, const Shape& w, const Shape& y, const ConvTranspose2dParams& p) {
  Conv2dArgs a{};
  a.N = x[0]; a.C = y[1]; a.H = y[2]; a.W = y[3];
  a.K = x[1]; a.R = w[2]; a.S = w[3]; a.P = x[2]; a.Q = x[3];
  a.p.stride_h = a.p.stride_w = p.stride;
  a.p.pad_h = a.p.pad_w = p.padding;
  a.p.groups = p.groups;
  return a;
}

Shape conv_transpose2d_output_shape(const Shape& x, const Shape& w, const ConvTranspose2dParams& p) {
  const char* op = "conv_transpose2d";
  OOMLAB_CHECK_T(ShapeError, x.size() == 4 && w.size() == 4, op,
                 ": expected 4-D input [N, C, H, W] and 4-D weight [C, K/groups, R, S], got input ",
                 shape_str(x), " and weight ", shape_str(w));
  OOMLAB_CHECK(p.stride >= 1 && p.padding >= 0 && p.output_padding >= 0 && p.output_padding < p.stride,
               op, ": invalid stride ", p.stride, ", padding ", p.padding, ", output_padding ",
               p.output_padding, " (need stride >= 1, padding >= 0, 0 <= output_padding < stride) for input ",
               shape_str(x), " and weight ", shape_str(w));
  OOMLAB_CHECK(p.groups >= 1, op, ": groups must be >= 1, got ", p.groups, " (input ", shape_str(x),
               ", weight ", shape_str(w), ")");
  OOMLAB_CHECK_T(ShapeError, w[0] == x[1] && x[1] % p.groups == 0, op, ": weight ", shape_str(w),
                 " expects ", w[0], " input channels but input ", shape_str(x), " has ", x[1],
                 (p.groups > 1 ? str_cat(" (groups=", p.groups, " must divide them)") : std::string()));
  OOMLAB_CHECK_T(ShapeError, w[2] >= 1 && w[3] >= 1 && w[1] >= 1, op, ": empty kernel in weight ",
                 shape_str(w), " for input ", shape_str(x));
  const int64_t ho = (x[2] - 1) * p.stride - 2 * p.padding + w[2] + p.output_padding;
  const int64_t wo = (x[3] - 1) * p.stride - 2 * p.padding + w[3] + p.output_padding;
  OOMLAB_CHECK_T(ShapeError, x[2] >= 1 && x[3] >= 1 && ho >= 1 && wo >= 1, op, ": input ", shape_str(x),
                 " with weight ", shape_str(w), ", stride ", p.stride, ", padding ", p.padding,
                 ", output_padding ", p.output_padding, " gives an empty output ", ho, "x", wo);
  return {x[0], w[1] * p.groups, ho, wo};
}
}  // namespace

Tensor conv_transpose2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const ConvTranspose2dParams& p) {
  const Tensor x0 = autocast_lower(x_in, "conv_transpose2d"), w0 = autocast_lower(w_in, "conv_transpose2d"),
               b0 = autocast_lower(b_in, "conv_transpose2d");
  const char* op = "conv_transpose2d";
  OOMLAB_CHECK_T(ValueError, x0.defined() && w0.defined(), op, ": undefined input or weight");
  const Shape y_shape = conv_transpose2d_output_shape(x0.shape(), w0.shape(), p);
  OOMLAB_CHECK_T(DTypeError, x0.dtype() == w0.dtype() && dtype_is_floating(x0.dtype()), op, ": input dtype ",
                 dtype_name(x0.dtype()), " and weight dtype ", dtype_name(w0.dtype()),
                 " must be the same floating type");
  OOMLAB_CHECK_T(DeviceError, x0.device() == w0.device(), op, ": input on ", x0.device().str(),
                 " and weight on ", w0.device().str());
  const bool has_bias = b0.defined();
  if (has_bias) {
    OOMLAB_CHECK_T(ShapeError, b0.dim() == 1 && b0.size(0) == y_shape[1], op, ": bias ",
                   shape_str(b0.shape()), " does not match weight ", shape_str(w0.shape()), " (expected [",
                   y_shape[1], "]; input ", shape_str(x0.shape()), ")");
    OOMLAB_CHECK_T(DTypeError, b0.dtype() == x0.dtype(), op, ": bias dtype ", dtype_name(b0.dtype()),
                   " differs from input dtype ", dtype_name(x0.dtype()));
    OOMLAB_CHECK_T(DeviceError, b0.device() == x0.device(), op, ": bias on ", b0.device().str(),
                   " and input on ", x0.device().str());
  }
  Tensor x = x0.contiguous(), w = w0.contiguous();
  Tensor b = has_bias ? b0.contiguous() : Tensor();
  const Conv2dArgs a = adjoint_conv_args(x.shape(), w.shape(), y_shape, p);
  Tensor y = Tensor::empty(y_shape, x.dtype(), x.device());
  Conv2dArgs f = a;
  f.dy = x.raw_data(); f.w = w.raw_data(); f.dx = y.raw_data();
  conv2d_backward_data_kernels().launch(x.device(), x.dtype(), f);
  if (has_bias)
    channel_bias_add_kernels().launch(y.device(), y.dtype(),
                                      ChannelBiasArgs{y.raw_data(), b.raw_data(), nullptr, nullptr, a.N,
                                                      y_shape[1], y_shape[2] * y_shape[3]});
  return attach_grad_fn(y, op, {x0, w0, b0}, [&]() -> BackwardFn {
    SavedTensor sx(w0.requires_grad() ? x : Tensor(), "conv_transpose2d");
    SavedTensor sw(x0.requires_grad() ? w : Tensor(), "conv_transpose2d");
    Shape x_shape = x.shape(), w_shape = w.shape();
    return [sx, sw, a, x_shape, w_shape](const Tensor& g0, const std::vector<bool>& needs) {
      Tensor g = g0.contiguous();
      Conv2dArgs k = a;
      k.x = g.raw_data();   // the adjoint conv's input is the output gradient
      Tensor gx, gw, gb;
      if (needs[0]) {
        Tensor w = sw.unpack();
        gx = Tensor::empty(x_shape, g.dtype(), g.device());
        k.w = w.raw_data(); k.y = gx.raw_data();
        conv2d_forward_kernels().launch(g.device(), g.dtype(), k);
      }
      if (needs[1]) {
        Tensor x = sx.unpack();
        gw = Tensor::empty(w_shape, g.dtype(), g.device());
        k.dy = x.raw_data(); k.dw = gw.raw_data();
        conv2d_backward_weight_kernels().launch(g.device(), g.dtype(), k);
      }
      if (needs.size() > 2 && needs[2]) {
        gb = Tensor::empty({a.C}, g.dtype(), g.device());
        channel_bias_grad_kernels().launch(g.device(), g.dtype(),
                                           ChannelBiasArgs{nullptr, nullptr, g.raw_data(), gb.raw_data(), a.N,
                                                           a.C, a.H * a.W});
      }
      return std::vector<Tensor>{gx, gw, gb};
    };
  });
}

}  // namespace oomlab
