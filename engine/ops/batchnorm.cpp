// batchnorm.cpp — batch_norm (torch.nn.functional.batch_norm semantics) with autograd.
// Inputs [N, C] or [N, C, H, W], viewed as [N, C, HW] (channels_last: [N*H*W, C, 1], y and
// dx channels_last too); weight/bias [C] or undefined
// (affine=false); running_mean/var [C] buffers (may be undefined in training only).
// Training: allocates y, save_mean[C], save_invstd[C] (in that order; stats are f32, or
// f64 for f64 inputs) and updates the running stats in place (no autograd, version
// bumped). Eval: allocates y only. Saved for backward: training: x, weight, save_mean,
// save_invstd; eval: x, weight and views of running_mean/var (no copies). Each is saved
// only when a gradient that needs it is requested. Backward allocates dx, dweight, dbias.
// batch_norm_relu: the same with relu fused into the kernels (issue 31): y = relu(bn(x)),
// also saves y (relu's mask) and its backward reads dy through it: bit-identical to
// batch_norm then relu, one pass over y and one dy-sized tensor fewer.
#include "engine/ops/batchnorm.h"

#include "engine/autograd/autocast.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "kernels/batchnorm.h"

namespace oomlab {

namespace {
// dtype of weight/bias/running stats/saved stats for an input dtype.
DType param_dtype_for(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

void check_param(const Tensor& t, const char* what, const Tensor& x, int64_t C) {
  if (!t.defined()) return;
  OOMLAB_CHECK_T(ShapeError, t.dim() == 1 && t.size(0) == C, "batch_norm: ", what, " has shape ",
                 shape_str(t.shape()), " but the input ", shape_str(x.shape()), " has ", C,
                 " channels (expected [", C, "])");
  // 16-bit inputs take float32 parameters and statistics (cuDNN's rule; the kernels read
  // them as float32): a half model keeps its BatchNorm in float32 (half_model, bn.float()).
  OOMLAB_CHECK_T(DTypeError, t.dtype() == param_dtype_for(x.dtype()), "batch_norm: ", what, " is ",
                 dtype_name(t.dtype()), " but a ", dtype_name(x.dtype()), " input takes ",
                 dtype_name(param_dtype_for(x.dtype())), " weight, bias and running stats",
                 x.dtype() == DType::f16 || x.dtype() == DType::bf16 ? " (keep BatchNorm in float32)" : "");
  OOMLAB_CHECK_T(DeviceError, t.device() == x.device(), "batch_norm: ", what, " is on ",
                 t.device().str(), " but the input is on ", x.device().str());
}

const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
void* mut_ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// The input's and parameters' shapes, dtypes, devices and the mode's requirements; returns
// the one parameter dtype of weight, bias and running stats (the kernel's contract).
DType check_batch_norm(const Tensor& x0, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, bool training, double eps) {
  OOMLAB_CHECK_T(ShapeError, x0.dim() == 2 || x0.dim() == 4,
                 "batch_norm: expected a [N, C] or [N, C, H, W] input, got ", shape_str(x0.shape()));
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x0.dtype()),
                 "batch_norm: input must be floating point, got ", dtype_name(x0.dtype()));
  OOMLAB_CHECK(eps > 0.0, "batch_norm: eps must be positive, got ", eps);
  const int64_t N = x0.size(0), C = x0.size(1);
  const int64_t HW = x0.dim() == 4 ? x0.size(2) * x0.size(3) : 1;
  check_param(weight, "weight", x0, C);
  check_param(bias, "bias", x0, C);
  check_param(running_mean, "running_mean", x0, C);
  check_param(running_var, "running_var", x0, C);
  OOMLAB_CHECK(running_mean.defined() == running_var.defined(),
               "batch_norm: running_mean and running_var must both be given or both be undefined");
  if (training) {
    OOMLAB_CHECK(N * HW > 1, "batch_norm: expected more than 1 value per channel when training, ",
                 "got input size ", shape_str(x0.shape()));
  } else {
    OOMLAB_CHECK(running_mean.defined(),
                 "batch_norm: running_mean and running_var must be defined in evaluation mode");
  }
  for (const Tensor* t : {&running_mean, &running_var})
    if (t->defined())
      OOMLAB_CHECK_T(ShapeError, t->is_contiguous(), "batch_norm: running stats must be contiguous, got ",
                     t->str());
  // One parameter dtype for weight, bias and running stats (the kernel's contract).
  DType pdt = param_dtype_for(x0.dtype());
  bool first = true;
  const Tensor* params[] = {&weight, &bias, &running_mean, &running_var};
  for (const Tensor* t : params) {
    if (!t->defined()) continue;
    if (first) { pdt = t->dtype(); first = false; }
    OOMLAB_CHECK_T(DTypeError, t->dtype() == pdt,
                   "batch_norm: weight, bias and running stats must share one dtype (got ", dtype_name(pdt),
                   " and ", dtype_name(t->dtype()), ")");
  }
  return pdt;
}
}  // namespace

namespace {
Tensor batch_norm_impl(const Tensor& x0, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                       Tensor& running_var, bool training, double momentum, double eps, bool relu) {
  const DType pdt = check_batch_norm(x0, weight, bias, running_mean, running_var, training, eps);
  autocast_note(x0, "batch_norm");   // fp32_compute: 16-bit input kept, float32 parameters and math
  // channels_last [N, C, H, W] is [N*H*W, C] in memory: the kernels see it as [N*HW, C, 1].
  const MemoryFormat f = x0.memory_format();
  const bool nhwc = f == MemoryFormat::channels_last;
  const int64_t C = x0.size(1), HW = x0.dim() == 4 ? x0.size(2) * x0.size(3) : 1;
  const int64_t N = nhwc ? x0.size(0) * HW : x0.size(0), kHW = nhwc ? 1 : HW;
  const Device dev = x0.device();
  Tensor x = x0.contiguous(f);
  Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = Tensor::empty_format(x.shape(), x.dtype(), dev, f);
  Tensor save_mean, save_invstd;
  if (training) {
    save_mean = Tensor::empty({C}, param_dtype_for(x.dtype()), dev);
    save_invstd = Tensor::empty({C}, param_dtype_for(x.dtype()), dev);
  }
  const bool update_stats = training && running_mean.defined();
  if (update_stats) {   // buffers: modified in place, outside autograd
    running_mean.bump_version();
    running_var.bump_version();
  }
  BatchNormArgs a{};
  a.N = N; a.C = C; a.HW = kHW; a.momentum = momentum; a.eps = eps; a.training = training;
  a.x = x.raw_data(); a.weight = ptr_or_null(w); a.bias = ptr_or_null(b); a.y = y.raw_data();
  a.running_mean = (update_stats || !training) ? running_mean.raw_data() : nullptr;
  a.running_var = (update_stats || !training) ? running_var.raw_data() : nullptr;
  a.save_mean = mut_ptr_or_null(save_mean);
  a.save_invstd = mut_ptr_or_null(save_invstd);
  a.relu = relu;
  a.channels_last = nhwc;
  batch_norm_forward_kernels().launch(dev, x.dtype(), a);

  const bool need_x = x0.requires_grad(), need_w = w.defined() && weight.requires_grad();
  const Tensor rm = training ? Tensor() : running_mean, rv = training ? Tensor() : running_var;
  return attach_grad_fn(y, relu ? "batch_norm_relu" : "batch_norm", {x0, weight, bias}, [&]() -> BackwardFn {
    const bool keep_x = need_x || need_w;
    SavedTensor sx(keep_x ? x : Tensor(), "batch_norm");
    SavedTensor sw(need_x ? w : Tensor(), "batch_norm");
    SavedTensor smean(keep_x ? (training ? save_mean : rm) : Tensor(), "batch_norm");
    SavedTensor sstat(keep_x ? (training ? save_invstd : rv) : Tensor(), "batch_norm");
    SavedTensor sy(relu ? y : Tensor(), "batch_norm_relu");   // relu's mask: the output, as relu saves it
    return [=](const Tensor& g0, const std::vector<bool>& needs) {
      Tensor g = g0.contiguous(f);
      Tensor xs = sx.unpack(), ws = sw.unpack(), m = smean.unpack(), s = sstat.unpack(), ys = sy.unpack();
      if (xs.defined()) xs = xs.contiguous(f);   // a saved-tensor hook may have repacked them
      if (ys.defined()) ys = ys.contiguous(f);
      const Device d = g.device();
      Tensor dx = needs[0] ? Tensor::empty_format(g.shape(), g.dtype(), d, f) : Tensor();
      Tensor dw = needs[1] ? Tensor::empty({C}, pdt, d) : Tensor();
      Tensor db = needs[2] ? Tensor::empty({C}, pdt, d) : Tensor();
      BatchNormArgs k{};
      k.N = N; k.C = C; k.HW = kHW; k.momentum = momentum; k.eps = eps; k.training = training;
      k.x = ptr_or_null(xs); k.weight = ptr_or_null(ws);
      if (training) { k.save_mean = mut_ptr_or_null(m); k.save_invstd = mut_ptr_or_null(s); }
      else { k.running_mean = mut_ptr_or_null(m); k.running_var = mut_ptr_or_null(s); }
      k.dy = g.raw_data(); k.dx = mut_ptr_or_null(dx); k.dweight = mut_ptr_or_null(dw);
      k.dbias = mut_ptr_or_null(db);
      k.relu = relu;
      k.channels_last = nhwc;
      k.y = mut_ptr_or_null(ys);
      batch_norm_backward_kernels().launch(d, g.dtype(), k);
      return std::vector<Tensor>{dx, dw, db};
    };
  });
}
}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                  Tensor& running_var, bool training, double momentum, double eps) {
  return batch_norm_impl(x, weight, bias, running_mean, running_var, training, momentum, eps, false);
}

Tensor batch_norm_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& running_mean,
                       Tensor& running_var, bool training, double momentum, double eps) {
  return batch_norm_impl(x, weight, bias, running_mean, running_var, training, momentum, eps, true);
}

}  // namespace oomlab
