// broadcast.cpp — broadcast_binary / div / sum_to / expand with autograd (broadcast.h);
// kernels via kernels/broadcast.h. Allocation order (identical on meta): forward: the
// output; backward: each input's gradient at the output's shape (mul / div: the product
// first), then its sum_to when its shape differs.
#include "engine/ops/broadcast.h"

#include <algorithm>

#include "engine/autograd/autocast.h"
#include "engine/autograd/node.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/ops/elementwise.h"

namespace oomlab {

namespace {
constexpr int kMaxRank = 8;
const char* op_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::add: return "add";
    case BinaryOp::sub: return "sub";
    case BinaryOp::mul: return "mul";
    case BinaryOp::div: return "div";
  }
  return "?";
}

// x's strides right-aligned to `shape` (rank of shape), 0 on each dim x broadcasts along.
void aligned_strides(const Tensor& x, const Shape& shape, int64_t* out) {
  const size_t pad = shape.size() - size_t(x.dim());
  const Shape st = contiguous_strides(x.shape());
  for (size_t d = 0; d < shape.size(); ++d)
    out[d] = d < pad || x.shape()[d - pad] == 1 ? 0 : st[d - pad];
}

// The gradient g (at the output's shape) reduced to an input's shape.
Tensor reduce_grad(const Tensor& g, const Shape& shape) { return g.shape() == shape ? g : sum_to(g, shape); }
}  // namespace

Shape broadcast_shape(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    OOMLAB_CHECK_T(ShapeError, da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ",
                   shape_str(b), " do not match and do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  OOMLAB_CHECK_T(ShapeError, out.size() <= size_t(kMaxRank), op, ": rank ", out.size(), " above ", kMaxRank);
  return out;
}

Tensor broadcast_binary(BinaryOp op, const Tensor& a_in, const Tensor& b_in) {
  const char* name = op_name(op);
  Tensor a0 = a_in, b0 = b_in;
  autocast_promote(a0, b0, name);
  OOMLAB_CHECK_T(DTypeError, a0.dtype() == b0.dtype(), name, ": dtypes ", dtype_name(a0.dtype()), " and ",
                 dtype_name(b0.dtype()), " differ");
  OOMLAB_CHECK_T(DeviceError, a0.device() == b0.device(), name, ": tensors on ", a0.device().str(), " and ",
                 b0.device().str());
  const Shape shape = broadcast_shape(a0.shape(), b0.shape(), name);
  Tensor a = a0.contiguous(), b = b0.contiguous();
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  BroadcastArgs k{};
  k.out = out.raw_data(); k.a = a.raw_data(); k.b = b.raw_data(); k.op = op;
  k.ndim = int(shape.size()); k.a_n = a.numel(); k.b_n = b.numel();
  std::copy(shape.begin(), shape.end(), k.shape);
  aligned_strides(a, shape, k.a_strides);
  aligned_strides(b, shape, k.b_strides);
  broadcast_binary_kernels().launch(a.device(), a.dtype(), k);
  const Shape sa = a.shape(), sb = b.shape();
  const bool need_a = a0.requires_grad(), need_b = b0.requires_grad();
  return attach_grad_fn(out, name, {a0, b0}, [&]() -> BackwardFn {
    const bool save_a = (op == BinaryOp::mul && need_b) || op == BinaryOp::div;
    const bool save_b = (op == BinaryOp::mul && need_a) || op == BinaryOp::div;
    SavedTensor sva(save_a ? a : Tensor(), name), svb(save_b ? b : Tensor(), name);
    return [=](const Tensor& g, const std::vector<bool>& needs) {
      Tensor ga, gb;
      if (op == BinaryOp::add || op == BinaryOp::sub) {
        if (needs[0]) ga = reduce_grad(g, sa);
        if (needs[1]) gb = op == BinaryOp::add ? reduce_grad(g, sb) : scale(reduce_grad(g, sb), -1.0);
      } else if (op == BinaryOp::mul) {
        if (needs[0]) ga = reduce_grad(broadcast_binary(BinaryOp::mul, g, svb.unpack()), sa);
        if (needs[1]) gb = reduce_grad(broadcast_binary(BinaryOp::mul, g, sva.unpack()), sb);
      } else {   // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2
        const Tensor av = sva.unpack(), bv = svb.unpack();
        if (needs[0]) ga = reduce_grad(broadcast_binary(BinaryOp::div, g, bv), sa);
        if (needs[1])
          gb = scale(reduce_grad(broadcast_binary(BinaryOp::div, broadcast_binary(BinaryOp::mul, g, av),
                                                  broadcast_binary(BinaryOp::mul, bv, bv)),
                                 sb),
                     -1.0);
      }
      return std::vector<Tensor>{ga, gb};
    };
  });
}

Tensor div(const Tensor& a, const Tensor& b) { return broadcast_binary(BinaryOp::div, a, b); }

Tensor sum_to(const Tensor& x0, const Shape& shape) {
  OOMLAB_CHECK_T(ShapeError, broadcast_shape(shape, x0.shape(), "sum_to") == x0.shape(), "sum_to: ",
                 shape_str(shape), " does not broadcast to ", shape_str(x0.shape()));
  Tensor x = x0.contiguous();
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  SumToArgs k{};
  k.out = out.raw_data(); k.in = x.raw_data(); k.ndim = int(x.dim()); k.out_n = out.numel();
  std::copy(x.shape().begin(), x.shape().end(), k.shape);
  aligned_strides(out, x.shape(), k.out_strides);
  sum_to_kernels().launch(x.device(), x.dtype(), k);
  const Shape in_shape = x.shape();
  return attach_grad_fn(out, "sum_to", {x0}, [&]() -> BackwardFn {
    return [in_shape](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{expand(g, in_shape).contiguous()};
    };
  });
}

Tensor expand(const Tensor& x, const Shape& shape_in) {
  Shape shape = shape_in;
  const size_t pad = shape.size() >= size_t(x.dim()) ? shape.size() - size_t(x.dim()) : 0;
  OOMLAB_CHECK_T(ShapeError, shape.size() >= size_t(x.dim()), "expand: ", shape_str(shape_in), " has fewer dims than ",
                 x.str());
  Shape strides(shape.size(), 0);
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d < pad) {
      OOMLAB_CHECK_T(ShapeError, shape[d] >= 0, "expand: -1 is not allowed for the new leading dim ", d);
      continue;
    }
    const int64_t have = x.shape()[d - pad];
    if (shape[d] == -1) shape[d] = have;
    OOMLAB_CHECK_T(ShapeError, shape[d] == have || have == 1, "expand: ", x.str(), " cannot expand to ",
                   shape_str(shape_in));
    strides[d] = shape[d] == have ? x.strides()[d - pad] : 0;
  }
  Tensor out = make_view(x, shape, strides, x.offset());
  const Shape in_shape = x.shape();
  return attach_grad_fn(out, "expand", {x}, [&]() -> BackwardFn {
    return [in_shape](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{sum_to(g, in_shape)}; };
  });
}

}  // namespace oomlab
