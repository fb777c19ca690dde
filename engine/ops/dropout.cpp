// dropout.cpp — dropout: checks, allocation, dispatch, autograd (kernels/dropout.h).
// Saved for backward: the uint8 keep-mask. dropout(training=false or p=0) returns x
// itself (no allocation); p=1 returns zeros (and a zero gradient). Allocation order
// (identical on meta): contiguous(x) if needed, y, then the mask (as PyTorch's
// native_dropout); backward: contiguous(g) if needed, dx.
#include "engine/ops/dropout.h"

#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "kernels/dropout.h"

namespace oomlab {

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
  const auto [seed, base] = reserve_draws(gen, x.device(), uint64_t(n), "dropout", /*graph_safe=*/true);
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
