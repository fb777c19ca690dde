// softmax.cpp — softmax / log_softmax over the last dim of [N, C] and masked_softmax
// (any rank, softmax over the last dim of scale * x, padded keys at -inf): checks,
// allocation, dispatch (kernels/softmax.h), autograd. Each saves its output y only.
// masked_softmax views x as rows of C = x.size(-1); with a key_padding_mask [B, C] row r
// belongs to batch r / (rows / B). Allocation order (identical on meta): forward:
// contiguous copies if any, y; backward: contiguous(g) if needed, dx.
#include "engine/ops/softmax.h"

#include <algorithm>

#include "engine/autograd/autocast.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "kernels/softmax.h"

namespace oomlab {

namespace {
Tensor softmax_impl(const Tensor& x_in, bool log) {
  const Tensor x0 = autocast_fp32(x_in, log ? "log_softmax" : "softmax");
  const char* op = log ? "log_softmax" : "softmax";
  OOMLAB_CHECK_T(ValueError, x0.defined(), op, ": undefined input");
  OOMLAB_CHECK_T(ShapeError, x0.dim() == 2, op, ": expected a 2-D input [N, C], got ", shape_str(x0.shape()));
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x0.dtype()), op, ": input must be floating point, got ",
                 dtype_name(x0.dtype()));
  Tensor x = x0.contiguous();
  const int64_t N = x.size(0), C = x.size(1);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  softmax_forward_kernels().launch(x.device(), x.dtype(),
                                   SoftmaxArgs{x.raw_data(), y.raw_data(), nullptr, nullptr, N, C, log});
  return attach_grad_fn(y, op, {x0}, [y, op, log, N, C]() -> BackwardFn {
    SavedTensor sy(y, op);
    return [sy, log, N, C](const Tensor& g0, const std::vector<bool>&) {
      Tensor y = sy.unpack();
      Tensor g = g0.contiguous();
      Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
      softmax_backward_kernels().launch(y.device(), y.dtype(),
                                        SoftmaxArgs{nullptr, y.raw_data(), g.raw_data(), dx.raw_data(), N, C, log});
      return std::vector<Tensor>{dx};
    };
  });
}
}  // namespace

Tensor softmax(const Tensor& x) { return softmax_impl(x, false); }
Tensor log_softmax(const Tensor& x) { return softmax_impl(x, true); }

Tensor masked_softmax(const Tensor& x_in, const Tensor& mask0, double scale, bool causal) {
  const Tensor x0 = autocast_fp32(x_in, "masked_softmax");
  OOMLAB_CHECK_T(ValueError, x0.defined(), "masked_softmax: undefined input");
  OOMLAB_CHECK_T(ShapeError, x0.dim() >= 1, "masked_softmax: input must have at least one dimension");
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x0.dtype()), "masked_softmax: input must be floating point, got ",
                 dtype_name(x0.dtype()));
  Tensor x = x0.contiguous();
  const int64_t C = x.size(-1), rows = C > 0 ? x.numel() / C : 0;
  int64_t rows_per_batch = rows > 0 ? rows : 1;
  Tensor mask;
  if (mask0.defined()) {
    OOMLAB_CHECK_T(ShapeError, x0.dim() >= 2 && mask0.dim() == 2 && mask0.size(0) == x0.size(0) &&
                                   mask0.size(1) == C,
                   "masked_softmax: key_padding_mask ", shape_str(mask0.shape()), " does not match input ",
                   shape_str(x0.shape()), " (expected [", x0.size(0), ", ", C, "])");
    OOMLAB_CHECK_T(DTypeError, mask0.dtype() == DType::u8, "masked_softmax: key_padding_mask must be uint8, got ",
                   dtype_name(mask0.dtype()));
    OOMLAB_CHECK_T(DeviceError, mask0.device() == x0.device(), "masked_softmax: input on ", x0.device().str(),
                   " but key_padding_mask on ", mask0.device().str());
    mask = mask0.contiguous();
    rows_per_batch = x0.size(0) > 0 ? std::max<int64_t>(rows / x0.size(0), 1) : 1;
  }
  OOMLAB_CHECK_T(ShapeError, !causal || x0.dim() >= 2, "masked_softmax: a causal mask needs [..., Tq, Tk] scores, got ",
                 shape_str(x0.shape()));
  const int64_t causal_tq = causal ? x0.size(-2) : 0;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  masked_softmax_forward_kernels().launch(
      x.device(), x.dtype(),
      MaskedSoftmaxArgs{x.raw_data(), mask.defined() ? mask.data<uint8_t>() : nullptr, y.raw_data(), nullptr,
                        nullptr, rows, C, rows_per_batch, scale, causal_tq});
  return attach_grad_fn(y, "masked_softmax", {x0}, [&]() -> BackwardFn {
    SavedTensor sy(y, "masked_softmax");
    return [sy, rows, C, rows_per_batch, scale](const Tensor& g0, const std::vector<bool>&) {
      Tensor y = sy.unpack();
      Tensor g = g0.contiguous();
      Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
      masked_softmax_backward_kernels().launch(
          y.device(), y.dtype(),
          MaskedSoftmaxArgs{nullptr, nullptr, y.raw_data(), g.raw_data(), dx.raw_data(), rows, C, rows_per_batch,
                            scale});
      return std::vector<Tensor>{dx};
    };
  });
}

}  // namespace oomlab
