// activation.cpp — relu, in-place relu_, dropout: checks, allocation, dispatch, autograd.
// Saved for backward: relu / relu_ save their output (relu_'s output is x's own memory,
// so nothing extra stays alive); dropout saves its uint8 keep-mask. relu_ rebases x's
// history: x gets a new "relu_" node whose single edge is x's previous grad_fn, and its
// version is bumped, so anything that saved x earlier fails in backward (PyTorch).
// dropout(training=false or p=0) returns x itself (no allocation); p=1 returns zeros.
#include "engine/ops/activation.h"

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"

namespace oomlab {

KernelTable<ReluArgs>& relu_forward_kernels() { static KernelTable<ReluArgs> t("relu"); return t; }
KernelTable<ReluArgs>& relu_backward_kernels() { static KernelTable<ReluArgs> t("relu_backward"); return t; }
KernelTable<DropoutArgs>& dropout_forward_kernels() { static KernelTable<DropoutArgs> t("dropout"); return t; }
KernelTable<DropoutArgs>& dropout_backward_kernels() {
  static KernelTable<DropoutArgs> t("dropout_backward");
  return t;
}

namespace {
// Backward shared by relu and relu_: dx = dy * (y > 0), y the saved output.
BackwardFn relu_backward_fn(const Tensor& y, const char* op) {
  SavedTensor sy(y, op);
  return [sy](const Tensor& g0, const std::vector<bool>&) {
    Tensor y = sy.unpack();
    Tensor g = g0.contiguous();
    Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
    relu_backward_kernels().launch(y.device(), y.dtype(),
                                   ReluArgs{y.raw_data(), y.raw_data(), g.raw_data(), dx.raw_data(), y.numel()});
    return std::vector<Tensor>{dx};
  };
}
}  // namespace

Tensor relu(const Tensor& x0) {
  Tensor x = x0.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  relu_forward_kernels().launch(x.device(), x.dtype(),
                                ReluArgs{x.raw_data(), y.raw_data(), nullptr, nullptr, x.numel()});
  return attach_grad_fn(y, "relu", {x0}, [y]() { return relu_backward_fn(y, "relu"); });
}

Tensor relu_(Tensor& x) {
  OOMLAB_CHECK_T(ValueError, x.defined(), "relu_: undefined tensor");
  OOMLAB_CHECK_T(AutogradError, !(grad_enabled() && x.is_leaf() && x.requires_grad()),
                 "relu_: a leaf Variable that requires grad (", x.str(),
                 ") is being used in an in-place operation");
  OOMLAB_CHECK_T(ShapeError, x.is_contiguous(), "relu_: in-place relu needs a contiguous tensor, got ",
                 x.str(), " with strides ", shape_str(x.strides()));
  x.bump_version();
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

Tensor dropout(const Tensor& x0, double p, bool training, Generator* gen) {
  OOMLAB_CHECK(p >= 0.0 && p <= 1.0, "dropout probability has to be between 0 and 1, but got ", p);
  if (!training || p == 0.0 || x0.numel() == 0) return x0;
  if (p == 1.0) {
    // Everything dropped: zeros, gradient zero (PyTorch multiplies by a zero scalar).
    Tensor y = Tensor::zeros(x0.shape(), x0.dtype(), x0.device());
    Shape shape = x0.shape();
    DType dt = x0.dtype();
    Device dev = x0.device();
    return attach_grad_fn(y, "dropout", {x0}, [=]() -> BackwardFn {
      return [=](const Tensor&, const std::vector<bool>&) {
        return std::vector<Tensor>{Tensor::zeros(shape, dt, dev)};
      };
    });
  }
  Tensor x = x0.contiguous();
  const int64_t n = x.numel();
  // Output then mask, as PyTorch's native_dropout allocates them.
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mask = Tensor::empty(x.shape(), DType::u8, x.device());
  uint64_t seed = 0, base = 0;
  if (gen) {
    seed = gen->seed;
    base = gen->reserve(uint64_t(n));
  } else {   // the device's generator, reserved atomically (other device threads draw too)
    DeviceGenerator& dg = device_generator(x.device());
    base = dg.with([&](Generator& g) { seed = g.seed; return g.reserve(uint64_t(n)); });
  }
  dropout_forward_kernels().launch(x.device(), x.dtype(),
                                   DropoutArgs{x.raw_data(), y.raw_data(), mask.data<uint8_t>(), nullptr,
                                               nullptr, n, p, seed, base});
  return attach_grad_fn(y, "dropout", {x0}, [mask, p]() -> BackwardFn {
    SavedTensor sm(mask, "dropout");
    return [sm, p](const Tensor& g0, const std::vector<bool>&) {
      Tensor m = sm.unpack();
      Tensor g = g0.contiguous();
      Tensor dx = Tensor::empty(g.shape(), g.dtype(), g.device());
      dropout_backward_kernels().launch(g.device(), g.dtype(),
                                        DropoutArgs{nullptr, nullptr, m.data<uint8_t>(), g.raw_data(),
                                                    dx.raw_data(), g.numel(), p, 0, 0});
      return std::vector<Tensor>{dx};
    };
  });
}

}  // namespace oomlab
