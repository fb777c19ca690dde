// activation.cpp — relu, in-place relu_, sigmoid, gelu, silu, hardswish, hardsigmoid: checks, allocation, dispatch,
// autograd (kernels/activation.h). Saved for backward: relu / relu_ / sigmoid save their
// output (relu_'s output is x's own memory, so nothing extra stays alive); gelu, silu,
// hardswish and hardsigmoid save x (as PyTorch's backward nodes).
// relu_ rebases x's history: x gets a new "relu_" node whose single edge is x's previous
// grad_fn, and its version is bumped, so anything that saved x earlier fails in backward
// (PyTorch). Allocation order (identical on meta): forward: contiguous(x) if needed, y;
// backward: contiguous(g) if needed, dx. A dense input (contiguous or channels_last) keeps its
// layout; y, g and dx follow it (engine/core/layout.h). add_relu_ is add_ and relu_ in one pass: its node
// "add_relu_" has edges to a's previous history and b, saves the result and hands relu's
// dx to both.
#include "engine/ops/activation.h"

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/core/layout.h"
#include "engine/ops/elementwise.h"
#include "kernels/activation.h"

namespace oomlab {

namespace {
// Backward shared by relu, relu_ and add_relu_: dx = dy * (y > 0), y the saved output,
// handed to each of the op's `inputs` (add_relu_: both addends).
BackwardFn relu_backward_fn(const Tensor& y, const char* op, size_t inputs = 1) {
  SavedTensor sy(y, op);
  return [sy, inputs](const Tensor& g0, const std::vector<bool>&) {
    Tensor y = dense(sy.unpack());
    Tensor g = laid_out_like(g0, y);
    Tensor dx = empty_like(y);
    relu_backward_kernels().launch(y.device(), y.dtype(),
                                   ReluArgs{y.raw_data(), y.raw_data(), g.raw_data(), dx.raw_data(), y.numel()});
    return std::vector<Tensor>(inputs, dx);
  };
}
}  // namespace

Tensor relu(const Tensor& x0) {
  Tensor x = dense(x0);
  Tensor y = empty_like(x);
  relu_forward_kernels().launch(x.device(), x.dtype(),
                                ReluArgs{x.raw_data(), y.raw_data(), nullptr, nullptr, x.numel()});
  return attach_grad_fn(y, "relu", {x0}, [y]() { return relu_backward_fn(y, "relu"); });
}

Tensor& add_relu_(Tensor& a, const Tensor& b_in) {
  const Tensor b = inplace_operand(a, b_in, "add_relu_");
  const bool track = any_requires_grad({a, b});
  Tensor before = inplace_history(a);
  Tensor bc = laid_out_like(b, a);
  a.bump_version();
  add_relu_kernels().launch(a.device(), a.dtype(), AddReluArgs{a.raw_data(), bc.raw_data(), a.raw_data(), a.numel()});
  if (!track) return a;
  Tensor result = a;   // saved after the bump: its version is the current one
  attach_grad_fn(a, "add_relu_", {before, b}, [result]() { return relu_backward_fn(result, "add_relu_", 2); });
  return a;
}

namespace {
// relu_ with or without its kernel (relu_rectified_: an earlier kernel already applied it).
Tensor relu_in_place(Tensor& x, bool run_kernel) {
  OOMLAB_CHECK_T(ValueError, x.defined(), "relu_: undefined tensor");
  OOMLAB_CHECK_T(AutogradError, !(grad_enabled() && x.is_leaf() && x.requires_grad()),
                 "relu_: a leaf Variable that requires grad (", x.str(),
                 ") is being used in an in-place operation");
  OOMLAB_CHECK_T(ShapeError, x.is_dense(),
                 "relu_: in-place relu needs a dense (contiguous or channels_last) tensor, got ", x.str(),
                 " with strides ", shape_str(x.strides()));
  x.bump_version();
  if (run_kernel)
    relu_forward_kernels().launch(x.device(), x.dtype(),
                                  ReluArgs{x.raw_data(), x.raw_data(), nullptr, nullptr, x.numel()});
  if (!any_requires_grad({x})) return x;
  // A stand-in for x *before* the op: same geometry, x's old grad_fn. attach_grad_fn
  // takes its edge from it, then installs the new node on x's own TensorImpl.
  auto before = std::make_shared<TensorImpl>();
  before->storage = x.storage();
  before->shape = x.shape();
  before->strides = x.strides();
  before->offset = x.offset();
  before->dtype = x.dtype();
  before->requires_grad = true;
  before->grad_fn = x.grad_fn();
  Tensor result = x;   // saved after the bump: its version is the current one
  attach_grad_fn(x, "relu_", {Tensor(std::move(before))},
                 [result]() { return relu_backward_fn(result, "relu_"); });
  return x;
}
}  // namespace

Tensor relu_(Tensor& x) { return relu_in_place(x, true); }
Tensor relu_rectified_(Tensor& x) { return relu_in_place(x, false); }

// sigmoid(x) = 1 / (1 + exp(-x)), as torch.sigmoid.
Tensor sigmoid(const Tensor& x0) {
  OOMLAB_CHECK_T(ValueError, x0.defined(), "sigmoid: undefined input");
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x0.dtype()), "sigmoid: input must be floating point, got ",
                 dtype_name(x0.dtype()));
  Tensor x = dense(x0);
  Tensor y = empty_like(x);
  sigmoid_forward_kernels().launch(x.device(), x.dtype(),
                                   SigmoidArgs{x.raw_data(), y.raw_data(), nullptr, nullptr, x.numel()});
  return attach_grad_fn(y, "sigmoid", {x0}, [y]() -> BackwardFn {
    SavedTensor sy(y, "sigmoid");
    return [sy](const Tensor& g0, const std::vector<bool>&) {
      Tensor y = sy.unpack();
      Tensor g = laid_out_like(g0, y);
      Tensor dx = empty_like(y);
      sigmoid_backward_kernels().launch(y.device(), y.dtype(),
                                        SigmoidArgs{nullptr, y.raw_data(), g.raw_data(), dx.raw_data(), y.numel()});
      return std::vector<Tensor>{dx};
    };
  });
}

// gelu(x, approximate) as F.gelu: "none" = x * Phi(x) (erf form), "tanh" =
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor gelu(const Tensor& x0, const std::string& approximate) {
  OOMLAB_CHECK_T(ValueError, approximate == "none" || approximate == "tanh",
                 "gelu: approximate must be \"none\" or \"tanh\", got \"", approximate, "\"");
  OOMLAB_CHECK_T(ValueError, x0.defined(), "gelu: undefined input");
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x0.dtype()), "gelu: input must be floating point, got ",
                 dtype_name(x0.dtype()));
  const bool tanh_approx = approximate == "tanh";
  Tensor x = dense(x0);
  Tensor y = empty_like(x);
  gelu_forward_kernels().launch(x.device(), x.dtype(),
                                GeluArgs{x.raw_data(), y.raw_data(), nullptr, nullptr, x.numel(), tanh_approx});
  return attach_grad_fn(y, "gelu", {x0}, [&]() -> BackwardFn {
    SavedTensor sx(x, "gelu");
    return [sx, tanh_approx](const Tensor& g0, const std::vector<bool>&) {
      Tensor x = sx.unpack();
      Tensor g = laid_out_like(g0, x);
      Tensor dx = empty_like(x);
      gelu_backward_kernels().launch(x.device(), x.dtype(),
                                     GeluArgs{x.raw_data(), nullptr, g.raw_data(), dx.raw_data(), x.numel(),
                                              tanh_approx});
      return std::vector<Tensor>{dx};
    };
  });
}

namespace {
// silu / hardswish / hardsigmoid: y = f(x); saves x; dx = f'(x) * dy from the saved input.
Tensor input_saving_activation(const Tensor& x0, const char* op, KernelTable<ActArgs>& (*fwd)(),
                               KernelTable<ActArgs>& (*bwd)()) {
  OOMLAB_CHECK_T(ValueError, x0.defined(), op, ": undefined input");
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x0.dtype()), op, ": input must be floating point, got ",
                 dtype_name(x0.dtype()));
  Tensor x = dense(x0);
  Tensor y = empty_like(x);
  fwd().launch(x.device(), x.dtype(), ActArgs{x.raw_data(), y.raw_data(), nullptr, nullptr, x.numel()});
  return attach_grad_fn(y, op, {x0}, [&]() -> BackwardFn {
    SavedTensor sx(x, op);
    return [sx, bwd](const Tensor& g0, const std::vector<bool>&) {
      Tensor x = sx.unpack();
      Tensor g = laid_out_like(g0, x);
      Tensor dx = empty_like(x);
      bwd().launch(x.device(), x.dtype(), ActArgs{x.raw_data(), nullptr, g.raw_data(), dx.raw_data(), x.numel()});
      return std::vector<Tensor>{dx};
    };
  });
}
}  // namespace

Tensor silu(const Tensor& x) { return input_saving_activation(x, "silu", silu_forward_kernels, silu_backward_kernels); }
Tensor hardswish(const Tensor& x) {
  return input_saving_activation(x, "hardswish", hardswish_forward_kernels, hardswish_backward_kernels);
}
Tensor hardsigmoid(const Tensor& x) {
  return input_saving_activation(x, "hardsigmoid", hardsigmoid_forward_kernels, hardsigmoid_backward_kernels);
}

}  // namespace oomlab
