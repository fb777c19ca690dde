// upsample.cpp — upsample2x (F.interpolate(scale_factor=2), mode "nearest" or
// "bilinear" with align_corners=false) on NCHW: checks, allocation, dispatch, autograd.
// Saved for backward: nothing but the input shape (both modes are linear in x).
// Allocation order (identical on meta): forward: contiguous(x) if needed, y;
// backward: contiguous(g) if needed, dx. Kernels: kernels/upsample.h.
// Errors: ShapeError (not 4-D), ValueError (unknown mode), DTypeError (not floating).
#include "engine/ops/upsample.h"

#include "engine/autograd/node.h"
#include "kernels/upsample.h"

namespace oomlab {

Tensor upsample2x(const Tensor& x0, const std::string& mode) {
  OOMLAB_CHECK_T(ValueError, x0.defined(), "upsample2x: undefined input");
  OOMLAB_CHECK(mode == "nearest" || mode == "bilinear", "upsample2x: unknown mode '", mode,
               "' (expected \"nearest\" or \"bilinear\")");
  OOMLAB_CHECK_T(ShapeError, x0.dim() == 4, "upsample2x: expected a 4-D input [N, C, H, W], got ",
                 shape_str(x0.shape()));
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x0.dtype()), "upsample2x: input must be floating point, got ",
                 dtype_name(x0.dtype()));
  const bool bilinear = mode == "bilinear";
  Tensor x = x0.contiguous();
  const Shape x_shape = x.shape();
  const int64_t N = x_shape[0], C = x_shape[1], H = x_shape[2], W = x_shape[3];
  Tensor y = Tensor::empty({N, C, 2 * H, 2 * W}, x.dtype(), x.device());
  Upsample2xArgs a{N * C, H, W, bilinear, x.raw_data(), y.raw_data(), nullptr, nullptr};
  upsample2x_forward_kernels().launch(x.device(), x.dtype(), a);
  const char* op = bilinear ? "upsample_bilinear2d" : "upsample_nearest2d";
  return attach_grad_fn(y, op, {x0}, [a, x_shape]() -> BackwardFn {
    return [a, x_shape](const Tensor& g0, const std::vector<bool>&) {
      Tensor g = g0.contiguous();
      Tensor dx = Tensor::empty(x_shape, g.dtype(), g.device());
      Upsample2xArgs k = a;
      k.x = nullptr; k.y = nullptr;
      k.dy = g.raw_data(); k.dx = dx.raw_data();
      upsample2x_backward_kernels().launch(g.device(), g.dtype(), k);
      return std::vector<Tensor>{dx};
    };
  });
}

}  // namespace oomlab
