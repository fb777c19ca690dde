// attention.cpp — masked_softmax and scaled_dot_product_attention.
// masked_softmax(x [B, ..., Tk], key_padding_mask uint8 [B, Tk] (1 = padded) or
//   undefined, scale): softmax over the last dim of scale * x with padded keys at -inf,
//   max-shifted; a row whose keys are all padded gives zeros (not NaN), and so does its
//   gradient. Without a mask x may have any rank. Saves its output only.
// scaled_dot_product_attention(q [B, NH, Tq, D], k [B, NH, Tk, D], v [B, NH, Tk, Dv]) =
//   dropout(masked_softmax(q k^T, mask, 1/sqrt(D))) v, composed from bmm, masked_softmax
//   and dropout, so it saves exactly what they save: q and k (first bmm), the softmax
//   output, the dropout keep-mask (uint8) and the dropped probabilities plus v (second
//   bmm). k^T is a transposed view (no copy); the raw scores are freed after the softmax.
#include <algorithm>
#include <cmath>

#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/ops/activation.h"
#include "engine/ops/transformer_kernels.h"
#include "engine/ops/transformer_ops.h"

namespace oomlab {

KernelTable<MaskedSoftmaxArgs>& masked_softmax_forward_kernels() {
  static KernelTable<MaskedSoftmaxArgs> t("masked_softmax");
  return t;
}
KernelTable<MaskedSoftmaxArgs>& masked_softmax_backward_kernels() {
  static KernelTable<MaskedSoftmaxArgs> t("masked_softmax_backward");
  return t;
}

Tensor masked_softmax(const Tensor& x0, const Tensor& mask0, double scale) {
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
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  masked_softmax_forward_kernels().launch(
      x.device(), x.dtype(),
      MaskedSoftmaxArgs{x.raw_data(), mask.defined() ? mask.data<uint8_t>() : nullptr, y.raw_data(), nullptr,
                        nullptr, rows, C, rows_per_batch, scale});
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

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                    double dropout_p, bool training, Generator* gen) {
  OOMLAB_CHECK_T(ValueError, q.defined() && k.defined() && v.defined(),
                 "scaled_dot_product_attention: undefined q, k or v");
  OOMLAB_CHECK_T(ShapeError,
                 q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(0) == k.size(0) && q.size(0) == v.size(0) &&
                     q.size(1) == k.size(1) && q.size(1) == v.size(1) && q.size(3) == k.size(3) &&
                     k.size(2) == v.size(2),
                 "scaled_dot_product_attention: q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), " and v ",
                 shape_str(v.shape()), " do not match (expected [B, NH, Tq, D], [B, NH, Tk, D], [B, NH, Tk, Dv])");
  const int64_t B = q.size(0), NH = q.size(1), Tq = q.size(2), D = q.size(3), Tk = k.size(2), Dv = v.size(3);
  const double scale = D > 0 ? 1.0 / std::sqrt(double(D)) : 1.0;
  Tensor qf = q.reshape({B * NH, Tq, D});
  Tensor kf = k.reshape({B * NH, Tk, D});
  Tensor scores = bmm(qf, kf.transpose(1, 2)).reshape({B, NH, Tq, Tk});
  qf = Tensor();
  kf = Tensor();
  Tensor p = masked_softmax(scores, mask, scale);
  scores = Tensor();   // saved by nobody: free it before the next allocations
  p = dropout(p, dropout_p, training, gen);
  Tensor vf = v.reshape({B * NH, Tk, Dv});
  return bmm(p.reshape({B * NH, Tq, Tk}), vf).reshape({B, NH, Tq, Dv});
}

}  // namespace oomlab
