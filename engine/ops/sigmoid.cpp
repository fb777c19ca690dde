// sigmoid.cpp — sigmoid(x) = 1 / (1 + exp(-x)) (torch.sigmoid): checks, allocation,
// dispatch, autograd. Saved for backward: the output y (dx = dy * (1 - y) * y).
// Allocation order (identical on meta): forward: contiguous(x) if needed, y; backward:
// contiguous(g) if needed, dx. Kernels: kernels/cpu/vision_cpu.cpp.
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/ops/vision_kernels.h"
#include "engine/ops/vision_ops.h"

namespace oomlab {

KernelTable<SigmoidArgs>& sigmoid_forward_kernels() {
  static KernelTable<SigmoidArgs> t("sigmoid");
  return t;
}
KernelTable<SigmoidArgs>& sigmoid_backward_kernels() {
  static KernelTable<SigmoidArgs> t("sigmoid_backward");
  return t;
}

Tensor sigmoid(const Tensor& x0) {
  OOMLAB_CHECK_T(ValueError, x0.defined(), "sigmoid: undefined input");
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x0.dtype()), "sigmoid: input must be floating point, got ",
                 dtype_name(x0.dtype()));
  Tensor x = x0.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  sigmoid_forward_kernels().launch(x.device(), x.dtype(),
                                   SigmoidArgs{x.raw_data(), y.raw_data(), nullptr, nullptr, x.numel()});
  return attach_grad_fn(y, "sigmoid", {x0}, [y]() -> BackwardFn {
    SavedTensor sy(y, "sigmoid");
    return [sy](const Tensor& g0, const std::vector<bool>&) {
      Tensor y = sy.unpack();
      Tensor g = g0.contiguous();
      Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
      sigmoid_backward_kernels().launch(y.device(), y.dtype(),
                                        SigmoidArgs{nullptr, y.raw_data(), g.raw_data(), dx.raw_data(), y.numel()});
      return std::vector<Tensor>{dx};
    };
  });
}

}  // namespace oomlab
