// elementwise.cpp — add/sub/mul/scale/add_scalar/add_/sum/mean with autograd, and the
// no-autograd in-place add_inplace / add_scalar_inplace; kernels via the tables of
// kernels/elementwise.h. Saved for backward: see elementwise.h.
#include "engine/ops/elementwise.h"

#include "engine/autograd/autocast.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/core/layout.h"
#include "engine/ops/broadcast.h"
#include "kernels/elementwise.h"

namespace oomlab {

namespace {
void check_same(const Tensor& a, const Tensor& b, const char* op) {
  OOMLAB_CHECK_T(ShapeError, a.shape() == b.shape(), op, ": shapes ", shape_str(a.shape()), " and ",
                 shape_str(b.shape()), " do not match");
  OOMLAB_CHECK_T(DTypeError, a.dtype() == b.dtype(), op, ": dtypes ", dtype_name(a.dtype()), " and ",
                 dtype_name(b.dtype()), " differ");
  OOMLAB_CHECK_T(DeviceError, a.device() == b.device(), op, ": tensors on ", a.device().str(), " and ",
                 b.device().str());
}

Tensor axpby(const Tensor& a0, const Tensor& b0, double alpha, double beta, double gamma) {
  Tensor a = dense(a0);
  Tensor b = b0.defined() ? laid_out_like(b0, a) : Tensor();
  Tensor out = empty_like(a);
  axpby_kernels().launch(a.device(), a.dtype(),
                         AxpbyArgs{out.raw_data(), a.raw_data(), b.defined() ? b.raw_data() : nullptr,
                                   alpha, beta, gamma, a.numel()});
  return out;
}
}  // namespace

Tensor add(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  autocast_promote(a, b, "add");
  if (a.shape() != b.shape()) return broadcast_binary(BinaryOp::add, a, b);
  check_same(a, b, "add");
  Tensor out = axpby(a, b, 1.0, 1.0, 0.0);
  return attach_grad_fn(out, "add", {a, b}, []() -> BackwardFn {
    return [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g, g}; };
  });
}

Tensor sub(const Tensor& a_in, const Tensor& b_in) {
  Tensor a = a_in, b = b_in;
  autocast_promote(a, b, "sub");
  if (a.shape() != b.shape()) return broadcast_binary(BinaryOp::sub, a, b);
  check_same(a, b, "sub");
  Tensor out = axpby(a, b, 1.0, -1.0, 0.0);
  return attach_grad_fn(out, "sub", {a, b}, []() -> BackwardFn {
    return [](const Tensor& g, const std::vector<bool>& needs) {
      return std::vector<Tensor>{g, needs[1] ? scale(g, -1.0) : Tensor()};
    };
  });
}

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  Tensor a0 = a_in, b0 = b_in;
  autocast_promote(a0, b0, "mul");
  if (a0.shape() != b0.shape()) return broadcast_binary(BinaryOp::mul, a0, b0);
  check_same(a0, b0, "mul");
  Tensor a = dense(a0), b = laid_out_like(b0, a);
  Tensor out = empty_like(a);
  mul_kernels().launch(a.device(), a.dtype(), MulArgs{out.raw_data(), a.raw_data(), b.raw_data(), 1.0, a.numel()});
  bool need_a = a0.requires_grad(), need_b = b0.requires_grad();
  return attach_grad_fn(out, "mul", {a0, b0}, [=]() -> BackwardFn {
    // saves b if a needs grad, a if b needs grad
    SavedTensor sa(need_b ? a : Tensor(), "mul"), sb(need_a ? b : Tensor(), "mul");
    return [sa, sb](const Tensor& g, const std::vector<bool>& needs) {
      return std::vector<Tensor>{needs[0] ? mul(g, sb.unpack()) : Tensor(),
                                 needs[1] ? mul(g, sa.unpack()) : Tensor()};
    };
  });
}

Tensor scale(const Tensor& a, double alpha) {
  Tensor out = axpby(a, Tensor(), alpha, 0.0, 0.0);
  return attach_grad_fn(out, "scale", {a}, [alpha]() -> BackwardFn {
    return [alpha](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{scale(g, alpha)}; };
  });
}

Tensor add_scalar(const Tensor& a, double beta) {
  Tensor out = axpby(a, Tensor(), 1.0, 0.0, beta);
  return attach_grad_fn(out, "add_scalar", {a}, []() -> BackwardFn {
    return [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g}; };
  });
}

Tensor pow_scalar(const Tensor& x0, double exponent) {
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x0.dtype()), "pow: input must be floating point, got ",
                 dtype_name(x0.dtype()));
  Tensor x = x0.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  pow_forward_kernels().launch(x.device(), x.dtype(),
                               PowArgs{x.raw_data(), y.raw_data(), nullptr, nullptr, exponent, x.numel()});
  return attach_grad_fn(y, "pow", {x0}, [&]() -> BackwardFn {
    SavedTensor sx(x, "pow");
    return [sx, exponent](const Tensor& g0, const std::vector<bool>&) {
      Tensor x = sx.unpack(), g = g0.contiguous();
      Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      pow_backward_kernels().launch(x.device(), x.dtype(),
                                    PowArgs{x.raw_data(), nullptr, g.raw_data(), dx.raw_data(), exponent, x.numel()});
      return std::vector<Tensor>{dx};
    };
  });
}

Tensor inplace_operand(const Tensor& a, const Tensor& b_in, const char* op) {
  // Under autocast the addend takes the destination's dtype (an in-place op cannot widen).
  const Tensor b = autocast_dtype() && b_in.defined() && a.defined() && b_in.dtype() != a.dtype() &&
                           dtype_is_floating(b_in.dtype()) && dtype_is_floating(a.dtype())
                       ? (autocast_rule("add_"), b_in.to(a.dtype()))
                       : b_in;
  OOMLAB_CHECK_T(AutogradError, !(grad_enabled() && a.is_leaf() && a.requires_grad()),
                 op, ": a leaf Variable that requires grad (", a.str(), ") is being used in an in-place operation");
  check_same(a, b, op);
  OOMLAB_CHECK_T(ShapeError, a.is_dense(), op, ": destination ", a.str(),
                 " must be dense (contiguous or channels_last)");
  return b;
}

Tensor inplace_history(const Tensor& a) {
  auto before = std::make_shared<TensorImpl>(*a.impl());
  before->grad.reset();
  before->grad_ready_hooks.clear();
  return Tensor(std::move(before));
}

Tensor& add_(Tensor& a, const Tensor& b_in) {
  const Tensor b = inplace_operand(a, b_in, "add_");
  const bool track = any_requires_grad({a, b});
  Tensor before = inplace_history(a);
  add_inplace(a, b);
  if (!track) return a;
  attach_grad_fn(a, "add_", {before, b}, []() -> BackwardFn {
    return [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g, g}; };
  });
  return a;
}

void add_inplace(Tensor& a, const Tensor& b, double alpha) {
  check_same(a, b, "add_");
  OOMLAB_CHECK_T(ShapeError, a.is_dense(), "add_: destination ", a.str(),
                 " must be dense (contiguous or channels_last)");
  Tensor bc = laid_out_like(b, a);
  a.bump_version();
  axpby_kernels().launch(a.device(), a.dtype(),
                         AxpbyArgs{a.raw_data(), a.raw_data(), bc.raw_data(), 1.0, alpha, 0.0, a.numel()});
}

void add_scalar_inplace(Tensor& a, double value) {
  OOMLAB_CHECK_T(ShapeError, a.is_dense(), "add_: destination ", a.str(),
                 " must be dense (contiguous or channels_last)");
  a.bump_version();
  axpby_kernels().launch(a.device(), a.dtype(),
                         AxpbyArgs{a.raw_data(), a.raw_data(), nullptr, 1.0, 0.0, value, a.numel()});
}

namespace {
Tensor sum_scaled(const Tensor& a_in, double alpha, const char* op) {
  const Tensor a0 = autocast_fp32(a_in, op);
  Tensor a = a0.contiguous();
  Tensor out = Tensor::empty({}, a.dtype(), a.device());
  sum_kernels().launch(a.device(), a.dtype(), SumArgs{out.raw_data(), a.raw_data(), alpha, a.numel()});
  Shape in_shape = a.shape();
  return attach_grad_fn(out, op, {a0}, [=]() -> BackwardFn {
    return [=](const Tensor& g, const std::vector<bool>&) {
      // d/da = alpha * g broadcast: fill with g's value, read on the host (an accelerator
      // synchronises for it; meta has no value: 0).
      Tensor gi = Tensor::empty(in_shape, g.dtype(), g.device());
      gi.fill_(g.device().is_meta() ? 0.0 : g.item() * alpha);
      return std::vector<Tensor>{gi};
    };
  });
}
}  // namespace

Tensor sum_all(const Tensor& a) { return sum_scaled(a, 1.0, "sum"); }
Tensor mean_all(const Tensor& a) {
  OOMLAB_CHECK_T(ShapeError, a.numel() > 0, "mean: empty tensor");
  return sum_scaled(a, 1.0 / double(a.numel()), "mean");
}

}  // namespace oomlab
