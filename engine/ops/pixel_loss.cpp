// pixel_loss.cpp — pixel_cross_entropy(logits [N, C, H, W], target int64 [N, H, W]):
// F.cross_entropy for segmentation = nll over log_softmax along C, mean over the pixels
// whose target is not ignore_index (-100; all ignored -> NaN, as PyTorch).
// One autograd node; saved for backward: the log-probabilities [N, C, H, W] and the
// target (as PyTorch's log_softmax + nll_loss2d keep). Allocation order (identical on
// meta): forward: contiguous logits/target if needed, logp, loss; backward:
// contiguous(g) if needed, dlogits. The target range is checked on the host for cpu
// tensors only (meta has no data; on cuda a host read would synchronise).
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/ops/vision_kernels.h"
#include "engine/ops/vision_ops.h"

namespace oomlab {

KernelTable<PixelCrossEntropyArgs>& pixel_cross_entropy_forward_kernels() {
  static KernelTable<PixelCrossEntropyArgs> t("pixel_cross_entropy");
  return t;
}
KernelTable<PixelCrossEntropyArgs>& pixel_cross_entropy_backward_kernels() {
  static KernelTable<PixelCrossEntropyArgs> t("pixel_cross_entropy_backward");
  return t;
}

namespace {
void check_inputs(const Tensor& logits, const Tensor& target) {
  const char* op = "pixel_cross_entropy";
  OOMLAB_CHECK_T(ValueError, logits.defined() && target.defined(), op, ": undefined logits or target");
  OOMLAB_CHECK_T(ShapeError, logits.dim() == 4, op, ": expected 4-D logits [N, C, H, W], got ",
                 shape_str(logits.shape()), " (target ", shape_str(target.shape()), ")");
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(logits.dtype()), op, ": logits must be floating point, got ",
                 dtype_name(logits.dtype()));
  const Shape& s = logits.shape();
  const Shape expected{s[0], s[2], s[3]};
  OOMLAB_CHECK_T(ShapeError, target.shape() == expected, op, ": target shape ", shape_str(target.shape()),
                 " does not match logits shape ", shape_str(s), " (expected ", shape_str(expected), ")");
  OOMLAB_CHECK_T(DTypeError, target.dtype() == DType::i64, op, ": target must be int64 (class indices), got ",
                 dtype_name(target.dtype()));
  OOMLAB_CHECK_T(DeviceError, target.device() == logits.device(), op, ": logits on ", logits.device().str(),
                 " but target on ", target.device().str());
  if (!target.device().is_cpu()) return;
  const int64_t C = s[1], H = s[2], W = s[3];
  const Shape& st = target.strides();
  const int64_t* t = target.data<int64_t>();
  for (int64_t n = 0; n < s[0]; ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        const int64_t c = t[n * st[0] + h * st[1] + w * st[2]];
        OOMLAB_CHECK_T(ValueError, c == kNllIgnoreIndex || (c >= 0 && c < C), op, ": target ", c,
                       " at pixel [", n, ", ", h, ", ", w, "] is out of bounds for ", C,
                       " classes (expected 0 <= target < ", C, " or ignore_index ", kNllIgnoreIndex, ")");
      }
}
}  // namespace

Tensor pixel_cross_entropy(const Tensor& logits0, const Tensor& target0) {
  check_inputs(logits0, target0);
  Tensor logits = logits0.contiguous(), target = target0.contiguous();
  const Shape shape = logits.shape();
  const int64_t N = shape[0], C = shape[1], HW = shape[2] * shape[3];
  Tensor logp = Tensor::empty(shape, logits.dtype(), logits.device());
  Tensor loss = Tensor::empty({}, logits.dtype(), logits.device());
  PixelCrossEntropyArgs a{};
  a.logits = logits.raw_data(); a.logp = logp.raw_data(); a.target = target.data<int64_t>();
  a.loss = loss.raw_data(); a.N = N; a.C = C; a.HW = HW; a.ignore_index = kNllIgnoreIndex;
  pixel_cross_entropy_forward_kernels().launch(logits.device(), logits.dtype(), a);
  return attach_grad_fn(loss, "pixel_cross_entropy", {logits0}, [&]() -> BackwardFn {
    SavedTensor sl(logp, "pixel_cross_entropy");
    SavedTensor st(target, "pixel_cross_entropy");
    return [sl, st, a](const Tensor& g0, const std::vector<bool>&) {
      Tensor lp = sl.unpack(), t = st.unpack();
      Tensor g = g0.contiguous();
      Tensor dlogits = Tensor::empty(lp.shape(), lp.dtype(), lp.device());
      PixelCrossEntropyArgs k = a;
      k.logits = nullptr; k.loss = nullptr;
      k.logp = lp.raw_data(); k.target = t.data<int64_t>();
      k.dloss = g.raw_data(); k.dlogits = dlogits.raw_data();
      pixel_cross_entropy_backward_kernels().launch(lp.device(), lp.dtype(), k);
      return std::vector<Tensor>{dlogits};
    };
  });
}

}  // namespace oomlab
