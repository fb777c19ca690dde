// groupnorm.cpp — group_norm (groupnorm.h). Backward gives dx = rstd * (dy*w - mean(dy*w)
// - xhat * mean(dy*w*xhat)) per group, dweight[c] = sum dy * xhat, dbias[c] = sum dy.
// Allocations: forward contiguous copies if any, y, mean, rstd; backward contiguous(g) if
// any, then dx, dweight, dbias (each only when needed).
#include "engine/ops/groupnorm.h"

#include "engine/autograd/autocast.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "kernels/groupnorm.h"

namespace oomlab {

namespace {
void check_param(const Tensor& x, const Tensor& p, const char* what) {
  if (!p.defined()) return;
  const int64_t C = x.size(1);
  OOMLAB_CHECK_T(ShapeError, p.dim() == 1 && p.size(0) == C, "group_norm: ", what, " shape ", shape_str(p.shape()),
                 " does not match the ", C, " channels of input ", shape_str(x.shape()));
  OOMLAB_CHECK_T(DTypeError, p.dtype() == x.dtype(), "group_norm: input dtype ", dtype_name(x.dtype()), " and ",
                 what, " dtype ", dtype_name(p.dtype()), " differ");
  OOMLAB_CHECK_T(DeviceError, p.device() == x.device(), "group_norm: input on ", x.device().str(), " but ", what,
                 " on ", p.device().str());
}
const void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
void* mut_ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }
}  // namespace

Tensor group_norm(const Tensor& x_in, int64_t G, const Tensor& weight0, const Tensor& bias0, double eps) {
  const Tensor x0 = autocast_fp32(x_in, "group_norm");
  OOMLAB_CHECK_T(ValueError, x0.defined(), "group_norm: undefined input");
  OOMLAB_CHECK_T(ShapeError, x0.dim() >= 2, "group_norm: input must be [N, C, *], got ", shape_str(x0.shape()));
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x0.dtype()), "group_norm: input must be floating point, got ",
                 dtype_name(x0.dtype()));
  const int64_t N = x0.size(0), C = x0.size(1);
  OOMLAB_CHECK(G >= 1 && C % G == 0, "group_norm: ", C, " channels cannot be split into ", G,
               " groups (num_groups must divide the channels)");
  OOMLAB_CHECK(eps >= 0.0, "group_norm: eps must be >= 0, got ", eps);
  check_param(x0, weight0, "weight");
  check_param(x0, bias0, "bias");
  Tensor x = x0.contiguous();
  Tensor w = weight0.defined() ? weight0.contiguous() : Tensor();
  Tensor b = bias0.defined() ? bias0.contiguous() : Tensor();
  const int64_t HW = N * C > 0 ? x.numel() / (N * C) : 0;
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const DType stats_dtype = (x.dtype() == DType::f16 || x.dtype() == DType::bf16) ? DType::f32 : x.dtype();
  Tensor mean = Tensor::empty({N, G}, stats_dtype, x.device());
  Tensor rstd = Tensor::empty({N, G}, stats_dtype, x.device());
  group_norm_forward_kernels().launch(
      x.device(), x.dtype(),
      GroupNormArgs{x.raw_data(), ptr_or_null(w), ptr_or_null(b), y.raw_data(), mean.raw_data(), rstd.raw_data(),
                    nullptr, nullptr, nullptr, nullptr, N, C, HW, G, eps});
  return attach_grad_fn(y, "group_norm", {x0, weight0, bias0}, [&]() -> BackwardFn {
    SavedTensor sx(x, "group_norm"), sw(w, "group_norm"), smean(mean, "group_norm"), srstd(rstd, "group_norm");
    return [sx, sw, smean, srstd, N, C, HW, G, eps](const Tensor& g0, const std::vector<bool>& needs) {
      Tensor x = sx.unpack(), w = sw.unpack(), mean = smean.unpack(), rstd = srstd.unpack();
      Tensor g = g0.contiguous();
      Tensor dx, dw, db;
      if (needs[0]) dx = Tensor::empty(x.shape(), x.dtype(), x.device());
      if (needs[1]) dw = Tensor::empty({C}, x.dtype(), x.device());
      if (needs[2]) db = Tensor::empty({C}, x.dtype(), x.device());
      group_norm_backward_kernels().launch(
          x.device(), x.dtype(),
          GroupNormArgs{x.raw_data(), ptr_or_null(w), nullptr, nullptr, mean.raw_data(), rstd.raw_data(), g.raw_data(),
                        mut_ptr_or_null(dx), mut_ptr_or_null(dw), mut_ptr_or_null(db), N, C, HW, G, eps});
      return std::vector<Tensor>{dx, dw, db};
    };
  });
}

}  // namespace oomlab
