// loss.cpp — softmax / log_softmax over the last dim of [N, C], nll_loss (mean,
// ignore_index -100), cross_entropy, count_correct: checks, allocation, autograd.
// Saved for backward: softmax / log_softmax save their output y; nll_loss saves the
// int64 target (and the shapes); cross_entropy therefore keeps log_softmax(x) + target.
// Target range is validated on the host for cpu tensors only (meta has no data; on
// cuda a host read would synchronise). count_correct reads data on the host, no
// allocation on cpu (so cpu and meta allocation sequences stay identical).
#include "engine/ops/loss.h"

#include <cmath>

#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"

namespace oomlab {

KernelTable<SoftmaxArgs>& softmax_forward_kernels() { static KernelTable<SoftmaxArgs> t("softmax"); return t; }
KernelTable<SoftmaxArgs>& softmax_backward_kernels() {
  static KernelTable<SoftmaxArgs> t("softmax_backward");
  return t;
}
KernelTable<NllArgs>& nll_forward_kernels() { static KernelTable<NllArgs> t("nll_loss"); return t; }
KernelTable<NllArgs>& nll_backward_kernels() { static KernelTable<NllArgs> t("nll_loss_backward"); return t; }

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

Tensor softmax_impl(const Tensor& x0, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  check_2d(x0, op, "input");
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

Tensor nll_loss(const Tensor& logp0, const Tensor& target0) {
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

Tensor cross_entropy(const Tensor& logits, const Tensor& target) {
  check_2d(logits, "cross_entropy", "logits");
  check_target(logits, target, "cross_entropy", true);   // fail before any work
  return nll_loss(log_softmax(logits), target);
}

namespace {
double host_value(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::f32: return double(static_cast<const float*>(base)[i]);
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::f16: return double(half_to_float(static_cast<const uint16_t*>(base)[i]));
    case DType::bf16: return double(bf16_to_float(static_cast<const uint16_t*>(base)[i]));
    default: throw DTypeError(str_cat("count_correct: unsupported logits dtype ", dtype_name(dt)));
  }
}
}  // namespace

int64_t count_correct(const Tensor& logits, const Tensor& target) {
  check_2d(logits, "count_correct", "logits");
  check_target(logits, target, "count_correct", false);
  if (logits.device().is_meta()) return 0;
  if (!logits.device().is_cpu()) {   // accelerator: copy both to host (cpu allocator only)
    Tensor hl = Tensor::empty(logits.shape(), logits.dtype(), cpu_device());
    Tensor ht = Tensor::empty(target.shape(), DType::i64, cpu_device());
    hl.copy_(logits);
    ht.copy_(target);
    return count_correct(hl, ht);
  }
  const int64_t N = logits.size(0), C = logits.size(1);
  const int64_t s0 = logits.strides()[0], s1 = logits.strides()[1], ts = target.strides()[0];
  const void* base = logits.raw_data();
  const int64_t* t = target.data<int64_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < N; ++i) {
    // torch.argmax: first maximal index; NaN counts as the maximum.
    int64_t best = 0;
    double bv = C > 0 ? host_value(base, logits.dtype(), i * s0) : 0.0;
    for (int64_t j = 1; j < C && !std::isnan(bv); ++j) {
      double v = host_value(base, logits.dtype(), i * s0 + j * s1);
      if (v > bv || std::isnan(v)) { bv = v; best = j; }
    }
    if (C > 0 && best == t[i * ts]) ++correct;
  }
  return correct;
}

}  // namespace oomlab
