// pool.cpp — max_pool2d, avg_pool2d, adaptive_avg_pool2d on NCHW or channels_last (output,
// indices and dx in the input's format) with autograd
// (torch.nn.functional semantics: floor output size, dilation 1, pad <= kernel/2,
// avg counts padding; adaptive bins start=floor(i*H/P), end=ceil((i+1)*H/P)).
// Allocation order: forward y, then (max_pool2d, only when x needs grad) the int64
// indices; backward dx. Saved for backward: max_pool2d saves x and the indices; the
// avg pools save only shapes.
#include "engine/ops/pool.h"

#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "kernels/pool.h"

namespace oomlab {

namespace {
void check_input(const Tensor& x, const char* op) {
  OOMLAB_CHECK_T(ShapeError, x.dim() == 4, op, ": expected an [N, C, H, W] input, got ",
                 shape_str(x.shape()));
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(x.dtype()), op, ": input must be floating point, got ",
                 dtype_name(x.dtype()));
  OOMLAB_CHECK_T(ShapeError, x.size(2) > 0 && x.size(3) > 0, op, ": input ", shape_str(x.shape()),
                 " has an empty spatial dimension");
}

// Validates p against x and returns the output size {P, Q}.
std::pair<int64_t, int64_t> pooled_size(const Tensor& x, const Pool2dParams& p, const char* op) {
  check_input(x, op);
  OOMLAB_CHECK(p.kernel_h > 0 && p.kernel_w > 0, op, ": kernel size must be positive, got ", p.kernel_h, "x",
               p.kernel_w);
  OOMLAB_CHECK(p.stride_h > 0 && p.stride_w > 0, op, ": stride must be positive, got ", p.stride_h, "x",
               p.stride_w);
  OOMLAB_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && p.pad_h <= p.kernel_h / 2 && p.pad_w <= p.kernel_w / 2, op,
               ": pad should be at most half of kernel size, got pad ", p.pad_h, "x", p.pad_w, " for kernel ",
               p.kernel_h, "x", p.kernel_w);
  const int64_t H = x.size(2), W = x.size(3);
  OOMLAB_CHECK_T(ShapeError, H + 2 * p.pad_h >= p.kernel_h && W + 2 * p.pad_w >= p.kernel_w, op, ": kernel ",
                 p.kernel_h, "x", p.kernel_w, " is larger than the padded input ", shape_str(x.shape()),
                 " (padding ", p.pad_h, "x", p.pad_w, ")");
  return {(H + 2 * p.pad_h - p.kernel_h) / p.stride_h + 1, (W + 2 * p.pad_w - p.kernel_w) / p.stride_w + 1};
}

Pool2dArgs make_args(const Tensor& x, int64_t P, int64_t Q, const Pool2dParams& p, bool adaptive) {
  Pool2dArgs a{};
  a.N = x.size(0); a.C = x.size(1); a.H = x.size(2); a.W = x.size(3); a.P = P; a.Q = Q;
  a.p = p; a.adaptive = adaptive;
  a.channels_last = x.memory_format() == MemoryFormat::channels_last;
  return a;
}

// Shared by avg_pool2d and adaptive_avg_pool2d: nothing saved but shapes.
Tensor avg_pool_impl(const Tensor& x0, const Pool2dArgs& args, const char* op) {
  const MemoryFormat f = args.channels_last ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  Tensor x = x0.contiguous(f);
  Tensor y = Tensor::empty_format({args.N, args.C, args.P, args.Q}, x.dtype(), x.device(), f);
  Pool2dArgs a = args;
  a.x = x.raw_data(); a.y = y.raw_data();
  avg_pool2d_forward_kernels().launch(x.device(), x.dtype(), a);
  return attach_grad_fn(y, op, {x0}, [args, f]() -> BackwardFn {
    return [args, f](const Tensor& g0, const std::vector<bool>&) {
      Tensor g = g0.contiguous(f);
      Tensor dx = Tensor::empty_format({args.N, args.C, args.H, args.W}, g.dtype(), g.device(), f);
      Pool2dArgs b = args;
      b.dy = g.raw_data(); b.dx = dx.raw_data();
      avg_pool2d_backward_kernels().launch(g.device(), g.dtype(), b);
      return std::vector<Tensor>{dx};
    };
  });
}
}  // namespace

Tensor max_pool2d(const Tensor& x0, const Pool2dParams& p) {
  auto [P, Q] = pooled_size(x0, p, "max_pool2d");
  const MemoryFormat f = x0.memory_format();
  Tensor x = x0.contiguous(f);
  const Device dev = x.device();
  Tensor y = Tensor::empty_format({x.size(0), x.size(1), P, Q}, x.dtype(), dev, f);
  // Indices are only needed by backward: skip them when no gradient will flow.
  const bool need_grad = any_requires_grad({x0});
  Tensor idx = need_grad ? Tensor::empty_format({x.size(0), x.size(1), P, Q}, DType::i64, dev, f) : Tensor();
  Pool2dArgs a = make_args(x, P, Q, p, false);
  a.x = x.raw_data(); a.y = y.raw_data();
  a.indices = idx.defined() ? idx.data<int64_t>() : nullptr;
  max_pool2d_forward_kernels().launch(dev, x.dtype(), a);
  Pool2dArgs args = make_args(x, P, Q, p, false);
  return attach_grad_fn(y, "max_pool2d", {x0}, [&]() -> BackwardFn {
    SavedTensor sx(x, "max_pool2d"), si(idx, "max_pool2d");
    return [sx, si, args, f](const Tensor& g0, const std::vector<bool>&) {
      Tensor g = g0.contiguous(f);
      Tensor xs = sx.unpack(), is = si.unpack().contiguous(f);   // x: kept alive as PyTorch does; shape only
      Tensor dx = Tensor::empty_format(xs.shape(), g.dtype(), g.device(), f);
      Pool2dArgs b = args;
      b.indices = is.data<int64_t>(); b.dy = g.raw_data(); b.dx = dx.raw_data();
      max_pool2d_backward_kernels().launch(g.device(), g.dtype(), b);
      return std::vector<Tensor>{dx};
    };
  });
}

Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p) {
  auto [P, Q] = pooled_size(x, p, "avg_pool2d");
  return avg_pool_impl(x, make_args(x, P, Q, p, false), "avg_pool2d");
}

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w) {
  check_input(x, "adaptive_avg_pool2d");
  OOMLAB_CHECK(out_h > 0 && out_w > 0, "adaptive_avg_pool2d: output size must be positive, got ", out_h, "x",
               out_w);
  return avg_pool_impl(x, make_args(x, out_h, out_w, Pool2dParams{}, true), "adaptive_avg_pool2d");
}

}  // namespace oomlab
