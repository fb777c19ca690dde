// sync_batchnorm.cpp — sync_batch_norm (torch.nn.SyncBatchNorm semantics) with autograd.
// Built on the batch_norm kernel tables (kernels/batchnorm.h), no new kernels:
//  * per-channel sums: the eval backward kernel with only dbias / dweight requested gives
//    sum(dy) and sum(dy * (x - rm) / sqrt(rv + eps)); with rm = rv = 0, eps = 1, dy = x it
//    is sum(x) and sum(x^2) exactly (invstd = 1/sqrt(1) = 1);
//  * per-channel affine maps: the eval forward kernel, y = (x - rm) / sqrt(rv + eps) * w + b,
//    with the global mean / var as rm / rv (forward, and both halves of dx in backward);
//  * running stats in place: the axpby kernel (out may alias a).
// Empty local inputs (N*H*W = 0) launch nothing but still take part in the all-reduces.
#include "engine/ops/sync_batchnorm.h"

#include "engine/autograd/autocast.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/ops/activation.h"
#include "engine/ops/batchnorm.h"
#include "engine/ops/elementwise.h"
#include "kernels/batchnorm.h"
#include "kernels/elementwise.h"

namespace oomlab {

namespace {
constexpr const char* kOp = "sync_batch_norm";

DType param_dtype_for(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }
void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

struct Dims { int64_t N, C, HW; };

void check_param(const Tensor& t, const char* what, const Tensor& x, int64_t C) {
  if (!t.defined()) return;
  OOMLAB_CHECK_T(ShapeError, t.dim() == 1 && t.size(0) == C, kOp, ": ", what, " has shape ", shape_str(t.shape()),
                 " but the input ", shape_str(x.shape()), " has ", C, " channels (expected [", C, "])");
  OOMLAB_CHECK_T(DTypeError, t.dtype() == param_dtype_for(x.dtype()), kOp, ": ", what, " is ",
                 dtype_name(t.dtype()), " but a ", dtype_name(x.dtype()), " input takes ",
                 dtype_name(param_dtype_for(x.dtype())), " weight, bias and running stats");
  OOMLAB_CHECK_T(DeviceError, t.device() == x.device(), kOp, ": ", what, " is on ", t.device().str(),
                 " but the input is on ", x.device().str());
}

// dbias = sum(dy), dweight = sum(dy * (x - mean) / sqrt(var + eps)) per channel (either
// output may be null; x / mean may be null when dweight is). Nothing runs for M = 0.
void channel_sums(const Tensor& x, const Tensor& dy, const Tensor& mean, const Tensor& var, double eps, Dims d,
                  void* dbias, void* dweight) {
  if (d.N * d.HW == 0) return;
  BatchNormArgs a{};
  a.N = d.N; a.C = d.C; a.HW = d.HW; a.eps = eps; a.training = false;
  a.x = ptr_or_null(x); a.dy = dy.raw_data();
  a.running_mean = ptr_or_null(mean); a.running_var = ptr_or_null(var);
  a.dbias = dbias; a.dweight = dweight;
  batch_norm_backward_kernels().launch(dy.device(), dy.dtype(), a);
}

// (x - mean) / sqrt(var + eps) * w (+ b) per channel, a new tensor like x (w, b may be undefined).
Tensor channel_affine(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& var,
                      double eps, Dims d) {
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (x.numel() == 0) return y;
  BatchNormArgs a{};
  a.N = d.N; a.C = d.C; a.HW = d.HW; a.eps = eps; a.training = false;
  a.x = x.raw_data(); a.weight = ptr_or_null(w); a.bias = ptr_or_null(b); a.y = y.raw_data();
  a.running_mean = mean.raw_data(); a.running_var = var.raw_data();
  batch_norm_forward_kernels().launch(x.device(), x.dtype(), a);
  return y;
}

// t = alpha * t + beta * u in place (no autograd; bumps t's version).
void axpby_inplace(const Tensor& t, double alpha, const Tensor& u, double beta) {
  t.bump_version();
  if (t.numel() == 0) return;
  axpby_kernels().launch(t.device(), t.dtype(),
                         AxpbyArgs{t.raw_data(), t.raw_data(), u.raw_data(), alpha, beta, 0.0, t.numel()});
}

void check_training_args(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                         const Tensor& running_var, double eps, const AllReduceSumFn& fn) {
  OOMLAB_CHECK_T(ShapeError, x.dim() == 2 || x.dim() == 4, kOp, ": expected a [N, C] or [N, C, H, W] input, got ",
                 shape_str(x.shape()));
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x.dtype()), kOp, ": input must be floating point, got ",
                 dtype_name(x.dtype()));
  OOMLAB_CHECK(eps > 0.0, kOp, ": eps must be positive, got ", eps);
  OOMLAB_CHECK(static_cast<bool>(fn), kOp, ": training needs an all-reduce function (sum across ranks); ",
               "none was given (use batch_norm for a single process)");
  const int64_t C = x.size(1);
  OOMLAB_CHECK_T(ShapeError, C > 0, kOp, ": the input ", shape_str(x.shape()), " has no channels");
  check_param(weight, "weight", x, C);
  check_param(bias, "bias", x, C);
  check_param(running_mean, "running_mean", x, C);
  check_param(running_var, "running_var", x, C);
  OOMLAB_CHECK(running_mean.defined() == running_var.defined(), kOp,
               ": running_mean and running_var must both be given or both be undefined");
  for (const Tensor* t : {&running_mean, &running_var})
    if (t->defined())
      OOMLAB_CHECK_T(ShapeError, t->is_contiguous(), kOp, ": running stats must be contiguous, got ", t->str());
}
}  // namespace

Tensor sync_batch_norm(const Tensor& x0, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                       Tensor& running_var, bool training, double momentum, double eps,
                       const AllReduceSumFn& all_reduce_sum) {
  if (!training) return batch_norm(x0, weight, bias, running_mean, running_var, false, momentum, eps);
  check_training_args(x0, weight, bias, running_mean, running_var, eps, all_reduce_sum);
  autocast_note(x0, "batch_norm");   // fp32_compute, as batch_norm: 16-bit input, float32 stats
  const Dims dims{x0.size(0), x0.size(1), x0.dim() == 4 ? x0.size(2) * x0.size(3) : 1};
  const int64_t C = dims.C, M = dims.N * dims.HW;
  const DType pdt = param_dtype_for(x0.dtype());
  const Device dev = x0.device();
  Tensor x = x0.contiguous();
  Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();

  // [sum(x) | sum(x^2) | count]: filled with the count, the sums overwrite the first 2C.
  Tensor stats = Tensor::full({2 * C + 1}, double(M), pdt, dev);
  if (M > 0) {
    Tensor zero = Tensor::zeros({C}, pdt, dev);   // mean 0 and var 0 with eps 1: invstd exactly 1
    channel_sums(x, x, zero, zero, 1.0, dims, stats.raw_data(), stats.narrow(0, C, C).raw_data());
  }
  all_reduce_sum(stats);
  const double n = dev.is_meta() ? double(M) : stats.narrow(0, 2 * C, 1).item();
  OOMLAB_CHECK(dev.is_meta() || n > 1.0, kOp, ": expected more than 1 value per channel across all ranks when ",
               "training, got a global count of ", n, " (this rank's input ", shape_str(x0.shape()), ")");
  const double inv_n = n > 0.0 ? 1.0 / n : 0.0;
  Tensor mean = scale(stats.narrow(0, 0, C), inv_n);
  Tensor var = relu(sub(scale(stats.narrow(0, C, C), inv_n), mul(mean, mean)));   // biased, >= 0
  Tensor y = channel_affine(x, w, b, mean, var, eps, dims);

  if (running_mean.defined()) {   // buffers: in place, outside autograd, one version bump each
    axpby_inplace(running_mean, 1.0 - momentum, mean, momentum);
    axpby_inplace(running_var, 1.0 - momentum, var, momentum * (n > 1.0 ? n / (n - 1.0) : 1.0));
  }

  const bool need_x = x0.requires_grad(), need_w = w.defined() && weight.requires_grad();
  return attach_grad_fn(y, kOp, {x0, weight, bias}, [&]() -> BackwardFn {
    const bool keep_x = need_x || need_w;
    SavedTensor sx(keep_x ? x : Tensor(), kOp), sw(need_x ? w : Tensor(), kOp);
    SavedTensor smean(keep_x ? mean : Tensor(), kOp), svar(keep_x ? var : Tensor(), kOp);
    const AllReduceSumFn fn = all_reduce_sum;
    return [=](const Tensor& g0, const std::vector<bool>& needs) {
      Tensor g = g0.contiguous();
      Tensor xs = sx.unpack(), ws = sw.unpack(), m = smean.unpack(), v = svar.unpack();
      const Device d = g.device();
      // [sum(dy) | sum(dy * xhat)] of this rank (xhat = (x - mean) * invstd, global stats).
      Tensor sums = M > 0 ? Tensor::empty({2 * C}, pdt, d) : Tensor::zeros({2 * C}, pdt, d);
      Tensor s_dy = sums.narrow(0, 0, C), s_dy_xhat = sums.narrow(0, C, C);
      channel_sums(xs, g, m, v, eps, dims, s_dy.raw_data(), needs[0] || needs[1] ? s_dy_xhat.raw_data() : nullptr);
      Tensor dw = needs[1] ? s_dy_xhat.clone() : Tensor();   // this rank's own (DDP reduces)
      Tensor db = needs[2] ? s_dy.clone() : Tensor();
      Tensor dx;
      if (needs[0]) {
        fn(sums);
        Tensor k = scale(s_dy_xhat, inv_n);                   // mean(dy * xhat)
        Tensor neg_mean_dy = scale(s_dy, -inv_n);             // -mean(dy)
        Tensor t = channel_affine(xs, k, Tensor(), m, v, eps, dims);   // xhat * k
        axpby_inplace(t, 1.0, g, -1.0);                                // xhat * k - dy
        Tensor neg_w = ws.defined() ? scale(ws, -1.0) : Tensor::full({C}, -1.0, pdt, d);
        // (t + mean(dy)) * invstd * (-w) = w * invstd * (dy - mean(dy) - xhat * k)
        dx = channel_affine(t, neg_w, Tensor(), neg_mean_dy, v, eps, dims);
      }
      return std::vector<Tensor>{dx, dw, db};
    };
  });
}

}  // namespace oomlab
