// layernorm.cpp — layer_norm(x [..., H], weight [H], bias [H], eps) over the last dim, as
// F.layer_norm with normalized_shape = [H] (biased variance). weight / bias may be
// undefined (elementwise_affine = false). Saves x, weight, mean and rstd ([rows]; float32
// for half inputs, else x's dtype), as PyTorch's native_layer_norm. Backward gives dx, dweight
// = sum_rows dy * xhat, dbias = sum_rows dy (fixed-order column sums: deterministic).
// Allocations: forward contiguous copies if any, y, mean, rstd; backward contiguous(g)
// if any, then dx, dweight, dbias (each only when needed).
#include "engine/ops/layernorm.h"

#include "engine/autograd/autocast.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "kernels/layernorm.h"

namespace oomlab {

namespace {
void check_param(const Tensor& x, const Tensor& p, const char* what) {
  if (!p.defined()) return;
  const int64_t H = x.size(-1);
  OOMLAB_CHECK_T(ShapeError, p.dim() == 1 && p.size(0) == H, "layer_norm: ", what, " shape ",
                 shape_str(p.shape()), " does not match the normalized shape [", H, "] of input ",
                 shape_str(x.shape()));
  OOMLAB_CHECK_T(DTypeError, p.dtype() == x.dtype(), "layer_norm: input dtype ", dtype_name(x.dtype()), " and ",
                 what, " dtype ", dtype_name(p.dtype()), " differ");
  OOMLAB_CHECK_T(DeviceError, p.device() == x.device(), "layer_norm: input on ", x.device().str(), " but ",
                 what, " on ", p.device().str());
}
const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
}  // namespace

Tensor layer_norm(const Tensor& x_in, const Tensor& weight0, const Tensor& bias0, double eps) {
  const Tensor x0 = autocast_fp32(x_in, "layer_norm");
  OOMLAB_CHECK_T(ValueError, x0.defined(), "layer_norm: undefined input");
  OOMLAB_CHECK_T(ShapeError, x0.dim() >= 1, "layer_norm: input must have at least one dimension, got ",
                 shape_str(x0.shape()));
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x0.dtype()), "layer_norm: input must be floating point, got ",
                 dtype_name(x0.dtype()));
  check_param(x0, weight0, "weight");
  check_param(x0, bias0, "bias");
  OOMLAB_CHECK(eps >= 0.0, "layer_norm: eps must be >= 0, got ", eps);
  Tensor x = x0.contiguous();
  Tensor w = weight0.defined() ? weight0.contiguous() : Tensor();
  Tensor b = bias0.defined() ? bias0.contiguous() : Tensor();
  const int64_t H = x.size(-1), rows = H > 0 ? x.numel() / H : 0;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  // Statistics in the compute type: float32 for half inputs (rstd overflows f16 when var + eps
  // < 2.3e-10, e.g. BERT's eps 1e-12 on a constant row), as PyTorch saves them.
  const DType stats_dtype = (x.dtype() == DType::f16 || x.dtype() == DType::bf16) ? DType::f32 : x.dtype();
  Tensor mean = Tensor::empty({rows}, stats_dtype, x.device());
  Tensor rstd = Tensor::empty({rows}, stats_dtype, x.device());
  layer_norm_forward_kernels().launch(
      x.device(), x.dtype(),
      LayerNormArgs{x.raw_data(), ptr_or_null(w), ptr_or_null(b), y.raw_data(), mean.raw_data(), rstd.raw_data(),
                    nullptr, nullptr, nullptr, nullptr, rows, H, eps});
  return attach_grad_fn(y, "layer_norm", {x0, weight0, bias0}, [&]() -> BackwardFn {
    SavedTensor sx(x, "layer_norm"), sw(w, "layer_norm"), smean(mean, "layer_norm"), srstd(rstd, "layer_norm");
    return [sx, sw, smean, srstd, rows, H, eps](const Tensor& g0, const std::vector<bool>& needs) {
      Tensor x = sx.unpack(), w = sw.unpack(), mean = smean.unpack(), rstd = srstd.unpack();
      Tensor g = g0.contiguous();
      Tensor dx, dw, db;
      if (needs[0]) dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      if (needs[1]) dw = Tensor::empty({H}, x.dtype(), x.device());
      if (needs[2]) db = Tensor::empty({H}, x.dtype(), x.device());
      layer_norm_backward_kernels().launch(
          x.device(), x.dtype(),
          LayerNormArgs{x.raw_data(), ptr_or_null(w), nullptr, nullptr, mean.raw_data(), rstd.raw_data(),
                        g.raw_data(), dx.defined() ? dx.raw_data() : nullptr,
                        dw.defined() ? dw.raw_data() : nullptr, db.defined() ? db.raw_data() : nullptr, rows, H,
                        eps});
      return std::vector<Tensor>{dx, dw, db};
    };
  });
}

}  // namespace oomlab
