// gelu.cpp — gelu(x, approximate) as F.gelu: "none" = x * Phi(x) (erf form), "tanh" =
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Saves x (the input, as PyTorch's
// GeluBackward). Allocations: forward contiguous(x) if needed, y; backward
// contiguous(g) if needed, dx. Any other `approximate` string is a ValueError.
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/ops/transformer_kernels.h"
#include "engine/ops/transformer_ops.h"

namespace oomlab {

KernelTable<GeluArgs>& gelu_forward_kernels() { static KernelTable<GeluArgs> t("gelu"); return t; }
KernelTable<GeluArgs>& gelu_backward_kernels() { static KernelTable<GeluArgs> t("gelu_backward"); return t; }

Tensor gelu(const Tensor& x0, const std::string& approximate) {
  OOMLAB_CHECK_T(ValueError, approximate == "none" || approximate == "tanh",
                 "gelu: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  OOMLAB_CHECK_T(ValueError, x0.defined(), "gelu: undefined input");
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x0.dtype()), "gelu: input must be floating point, got ",
                 dtype_name(x0.dtype()));
  const bool tanh_approx = approximate == "tanh";
  Tensor x = x0.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  gelu_forward_kernels().launch(x.device(), x.dtype(),
                                GeluArgs{x.raw_data(), y.raw_data(), nullptr, nullptr, x.numel(), tanh_approx});
  return attach_grad_fn(y, "gelu", {x0}, [&]() -> BackwardFn {
    SavedTensor sx(x, "gelu");
    return [sx, tanh_approx](const Tensor& g0, const std::vector<bool>&) {
      Tensor x = sx.unpack();
      Tensor g = g0.contiguous();
      Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      gelu_backward_kernels().launch(x.device(), x.dtype(),
                                     GeluArgs{x.raw_data(), nullptr, g.raw_data(), dx.raw_data(), x.numel(),
                                              tanh_approx});
      return std::vector<Tensor>{dx};
    };
  });
}

}  // namespace oomlab
