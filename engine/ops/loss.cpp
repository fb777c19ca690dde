// loss.cpp — nll_loss (mean, ignore_index -100), cross_entropy = nll_loss(log_softmax),
// count_correct, and pixel_cross_entropy (F.cross_entropy over NCHW logits): checks,
// allocation, dispatch (kernels/loss.h), autograd. Saved for backward: nll_loss saves the
// int64 target (and the shapes), so cross_entropy keeps log_softmax(x) + target;
// pixel_cross_entropy saves the log-probabilities [N, C, H, W] and the target (as PyTorch's
// log_softmax + nll_loss2d). Target ranges are validated on the host for cpu tensors only
// (meta has no data; on cuda a host read would synchronise). count_correct (kernels/loss.h's
// table) allocates nothing on any device (so cpu, meta and cuda allocation sequences stay
// identical); it returns 0 on meta.
#include "engine/ops/loss.h"

#include <cmath>

#include "engine/autograd/autocast.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/ops/softmax.h"
#include "kernels/loss.h"

namespace oomlab {

namespace {
void check_2d(const Tensor& x, const char* op, const char* what) {
  OOMLAB_CHECK_T(ValueError, x.defined(), op, ": undefined ", what);
  OOMLAB_CHECK_T(ShapeError, x.dim() == 2, op, ": expected a 2-D ", what, " [N, C], got ", shape_str(x.shape()));
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x.dtype()), op, ": ", what, " must be floating point, got ",
                 dtype_name(x.dtype()));
}

// Shape/dtype/device of target against scores [N, C]; on cpu also the class range.
void check_target(const Tensor& scores, const Tensor& target, const char* op, bool check_range) {
  OOMLAB_CHECK_T(ValueError, target.defined(), op, ": undefined target");
  OOMLAB_CHECK_T(ShapeError, target.dim() == 1 && target.size(0) == scores.size(0), op, ": target shape ",
                 shape_str(target.shape()), " does not match input shape ", shape_str(scores.shape()),
                 " (expected [", scores.size(0), "])");
  OOMLAB_CHECK_T(DTypeError, target.dtype() == DType::i64, op, ": target must be int64 (class indices), got ",
                 dtype_name(target.dtype()));
  OOMLAB_CHECK_T(DeviceError, target.device() == scores.device(), op, ": input on ", scores.device().str(),
                 " but target on ", target.device().str());
  if (!check_range || !target.device().is_cpu()) return;
  const int64_t* t = target.data<int64_t>();
  const int64_t N = target.size(0), st = target.strides()[0], C = scores.size(1);
  for (int64_t i = 0; i < N; ++i) {
    int64_t c = t[i * st];
    OOMLAB_CHECK_T(ValueError, c == kNllIgnoreIndex || (c >= 0 && c < C), op, ": target ", c, " (row ", i,
                   ") is out of bounds for ", C, " classes (expected 0 <= target < ", C,
                   " or ignore_index ", kNllIgnoreIndex, ")");
  }
}
}  // namespace

Tensor nll_loss(const Tensor& logp_in, const Tensor& target0) {
  const Tensor logp0 = autocast_fp32(logp_in, "nll_loss");
  check_2d(logp0, "nll_loss", "log_probs");
  check_target(logp0, target0, "nll_loss", true);
  Tensor logp = logp0.contiguous(), target = target0.contiguous();
  const int64_t N = logp.size(0), C = logp.size(1);
  Tensor loss = Tensor::empty({}, logp.dtype(), logp.device());
  nll_forward_kernels().launch(logp.device(), logp.dtype(),
                               NllArgs{logp.raw_data(), target.data<int64_t>(), loss.raw_data(), nullptr,
                                       nullptr, N, C, kNllIgnoreIndex});
  DType dt = logp.dtype();
  Device dev = logp.device();
  return attach_grad_fn(loss, "nll_loss", {logp0}, [=]() -> BackwardFn {
    SavedTensor st(target, "nll_loss");
    return [st, N, C, dt, dev](const Tensor& g0, const std::vector<bool>&) {
      Tensor t = st.unpack();
      Tensor g = g0.contiguous();
      Tensor dlogp = Tensor::empty({N, C}, dt, dev);
      nll_backward_kernels().launch(dev, dt,
                                    NllArgs{nullptr, t.data<int64_t>(), nullptr, g.raw_data(), dlogp.raw_data(),
                                            N, C, kNllIgnoreIndex});
      return std::vector<Tensor>{dlogp};
    };
  });
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target) {
  const Tensor logits = autocast_fp32(logits_in, "cross_entropy");
  check_2d(logits, "cross_entropy", "logits");
  check_target(logits, target, "cross_entropy", true);   // fail before any work
  return nll_loss(log_softmax(logits), target);
}

int64_t count_correct(const Tensor& logits, const Tensor& target) {
  check_2d(logits, "count_correct", "logits");
  check_target(logits, target, "count_correct", false);
  if (logits.device().is_meta()) return 0;
  if (!logits.device().is_cpu() && !(logits.is_contiguous() && target.is_contiguous())) {
    // a strided accelerator tensor: copy both to host (cpu allocator only)
    Tensor hl = Tensor::empty(logits.shape(), logits.dtype(), cpu_device());
    Tensor ht = Tensor::empty(target.shape(), DType::i64, cpu_device());
    hl.copy_(logits);
    ht.copy_(target);
    return count_correct(hl, ht);
  }
  int64_t correct = 0;
  count_correct_kernels().launch(logits.device(), logits.dtype(),
                                 CountCorrectArgs{logits.raw_data(), target.data<int64_t>(), logits.size(0),
                                                  logits.size(1), logits.strides()[0], logits.strides()[1],
                                                  target.strides()[0], &correct});
  return correct;
}

// ---- pixel_cross_entropy -----------------------------------------------------------------
// Mean over the pixels whose target is not ignore_index (all ignored -> NaN, as PyTorch).
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

Tensor pixel_cross_entropy(const Tensor& logits_in, const Tensor& target0) {
  const Tensor logits0 = autocast_fp32(logits_in, "pixel_cross_entropy");
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
