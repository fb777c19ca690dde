// view.cpp — reshape/flatten/transpose/permute/narrow/contiguous/clone/to(dtype)/detach,
// the Tensor methods of the view family (contracts in view.h). Views share storage and
// save nothing for backward (only shapes). contiguous(), clone() and to() allocate a
// copy; their backward saves nothing. narrow's backward writes the gradient into a zero
// tensor's slice (through the strided copy kernel when the slice is not contiguous).
#include "engine/ops/view.h"

#include "engine/autograd/node.h"
#include "engine/core/checked_math.h"
#include "engine/core/error.h"
#include "kernels/copy.h"

namespace oomlab {
namespace {
Shape infer_shape(const Shape& in, Shape out, const char* op) {
  int64_t known = 1, neg = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      OOMLAB_CHECK_T(ShapeError, neg < 0, op, ": only one dimension can be -1 in ", shape_str(out));
      neg = int64_t(i);
    } else {
      OOMLAB_CHECK_T(ShapeError, out[i] >= 0, op, ": invalid dimension in ", shape_str(out));
      known = checked_mul(known, out[i], op);
    }
  }
  int64_t n = shape_numel(in);
  if (neg >= 0) {
    OOMLAB_CHECK_T(ShapeError, known != 0 && n % known == 0, op, ": shape ", shape_str(out),
                   " is invalid for input of shape ", shape_str(in));
    out[neg] = n / known;
  }
  OOMLAB_CHECK_T(ShapeError, shape_numel(out) == n, op, ": shape ", shape_str(out),
                 " is invalid for input of shape ", shape_str(in));
  return out;
}

int64_t wrap_dim(int64_t d, int64_t n, const char* op) {
  if (d < 0) d += n;
  OOMLAB_CHECK_T(ShapeError, d >= 0 && d < n, op, ": dimension out of range (rank ", n, ")");
  return d;
}
}  // namespace

Tensor Tensor::reshape(const Shape& new_shape) const {
  Shape out_shape = infer_shape(shape(), new_shape, "reshape");
  Tensor src = is_contiguous() ? *this : contiguous();
  Tensor out = make_view(src, out_shape, contiguous_strides(out_shape), src.offset());
  Shape in_shape = shape();
  return attach_grad_fn(out, "reshape", {src}, [in_shape]() -> BackwardFn {
    return [in_shape](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{g.reshape(in_shape)};
    };
  });
}

Tensor Tensor::flatten(int64_t start_dim) const {
  start_dim = wrap_dim(start_dim, dim(), "flatten");
  Shape s(shape().begin(), shape().begin() + start_dim);
  s.push_back(-1);
  if (numel() == 0) { s.back() = 0; }
  return reshape(s);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  OOMLAB_CHECK_T(ShapeError, int64_t(dims.size()) == dim(), "permute: ", dims.size(),
                 " dims given for ", str());
  Shape s(dim()), st(dim());
  std::vector<int64_t> inverse(dim(), -1);
  for (int64_t i = 0; i < dim(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    OOMLAB_CHECK_T(ShapeError, inverse[d] < 0, "permute: repeated dim ", d);
    inverse[d] = i;
    s[i] = shape()[d];
    st[i] = strides()[d];
  }
  Tensor out = make_view(*this, s, st, offset());
  return attach_grad_fn(out, "permute", {*this}, [inverse]() -> BackwardFn {
    return [inverse](const Tensor& g, const std::vector<bool>&) {
      return std::vector<Tensor>{g.permute(inverse)};
    };
  });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> p(dim());
  for (int64_t i = 0; i < dim(); ++i) p[i] = i;
  std::swap(p[wrap_dim(d0, dim(), "transpose")], p[wrap_dim(d1, dim(), "transpose")]);
  return permute(p);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  OOMLAB_CHECK_T(ShapeError, start >= 0 && length >= 0 && start + length <= shape()[d], "narrow: range [",
                 start, ", ", start + length, ") out of bounds for dim ", d, " of ", str());
  Shape s = shape();
  s[d] = length;
  Tensor out = make_view(*this, s, strides(), offset() + start * strides()[d]);
  Shape in_shape = shape();
  DType dt = dtype();
  Device dev = device();
  return attach_grad_fn(out, "narrow", {*this}, [=]() -> BackwardFn {
    return [=](const Tensor& g, const std::vector<bool>&) {
      Tensor gi = Tensor::zeros(in_shape, dt, dev);
      Tensor slot = make_view(gi, g.shape(), gi.strides(), start * gi.strides()[d]);
      // write g into the slice: copy through a contiguous temp when the slice is strided
      if (slot.is_contiguous()) slot.copy_(g);
      else {
        CopyArgs a{};
        Tensor gc = g.contiguous();
        a.out = slot.raw_data(); a.out_dtype = dt; a.in = gc.raw_data(); a.in_dtype = dt;
        a.ndim = int(gc.dim());
        Shape cst = contiguous_strides(gc.shape());
        for (int i = 0; i < a.ndim; ++i) {
          a.shape[i] = gc.shape()[i];
          a.in_strides[i] = cst[i];
          a.out_strides[i] = slot.strides()[i];
        }
        copy_kernels().launch(dev, dt, a);
      }
      return std::vector<Tensor>{gi};
    };
  });
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::contiguous(MemoryFormat f) const {
  if (is_contiguous(f)) return *this;
  Tensor out = Tensor::empty_format(shape(), dtype(), device(), f);
  out.copy_(*this);
  out.impl()->storage->version = 0;
  return attach_grad_fn(out, "contiguous", {*this}, []() -> BackwardFn {
    return [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g}; };
  });
}

Tensor Tensor::clone() const {
  Tensor out = Tensor::empty(shape(), dtype(), device());
  out.copy_(*this);
  out.impl()->storage->version = 0;
  return attach_grad_fn(out, "clone", {*this}, []() -> BackwardFn {
    return [](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g}; };
  });
}

Tensor Tensor::detach() const {
  Tensor v = make_view(*this, shape(), strides(), offset());
  v.impl()->name = impl_->name;
  return v;
}

Tensor Tensor::to(DType dt) const {
  if (dt == dtype()) return *this;
  Tensor out = empty_like(*this, dt);   // a dense tensor keeps its memory format (torch's .to)
  out.copy_(*this);
  out.impl()->storage->version = 0;
  DType src = dtype();
  if (!dtype_is_floating(dt) || !dtype_is_floating(src)) return out;
  return attach_grad_fn(out, "to", {*this}, [src]() -> BackwardFn {
    return [src](const Tensor& g, const std::vector<bool>&) { return std::vector<Tensor>{g.to(src)}; };
  });
}

}  // namespace oomlab
