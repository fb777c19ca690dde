// concat.cpp — cat(tensors, dim), split(x, sizes, dim), chunk(x, chunks, dim), as torch.
// cat copies each input into its slice of one new tensor with the strided copy kernel
// (inputs may be non-contiguous); its backward returns narrow views of the output
// gradient (no copies). split and chunk return narrow() views of x (PyTorch returns
// views), each with its own "narrow" node. Nothing but shapes is saved. Shapes must
// agree off `dim` (ShapeError naming both shapes); chunk sizes follow torch.chunk
// (ceil(size / chunks) each, the last smaller, possibly fewer than `chunks` pieces).
#include "engine/ops/concat.h"

#include <algorithm>

#include "engine/autograd/autocast.h"
#include "engine/autograd/node.h"
#include "kernels/copy.h"

namespace oomlab {
namespace {
int64_t wrap_dim(int64_t d, int64_t n, const char* op) {
  const int64_t orig = d;
  if (d < 0) d += n;
  OOMLAB_CHECK_T(ShapeError, d >= 0 && d < n, op, ": dimension ", orig, " out of range for a ", n, "-D tensor");
  return d;
}
}  // namespace

Tensor cat(const std::vector<Tensor>& tensors_in, int64_t dim) {
  OOMLAB_CHECK_T(ValueError, !tensors_in.empty(), "cat: expected a non-empty list of tensors");
  std::vector<Tensor> promoted;
  if (autocast_dtype()) {
    promoted = tensors_in;
    for (const Tensor& t : promoted) OOMLAB_CHECK_T(ValueError, t.defined(), "cat: a tensor is undefined");
    autocast_promote(promoted, "cat");
  }
  const std::vector<Tensor>& tensors = autocast_dtype() ? promoted : tensors_in;
  const Tensor& t0 = tensors[0];
  OOMLAB_CHECK_T(ValueError, t0.defined(), "cat: tensor 0 is undefined");
  OOMLAB_CHECK_T(ShapeError, t0.dim() > 0, "cat: zero-dimensional tensor (tensor 0) cannot be concatenated");
  OOMLAB_CHECK_T(ShapeError, t0.dim() <= 8, "cat: rank ", t0.dim(), " > 8 is not supported");
  const int64_t d = wrap_dim(dim, t0.dim(), "cat");
  Shape out_shape = t0.shape();
  out_shape[d] = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    OOMLAB_CHECK_T(ValueError, t.defined(), "cat: tensor ", i, " is undefined");
    OOMLAB_CHECK_T(DTypeError, t.dtype() == t0.dtype(), "cat: tensor 0 is ", dtype_name(t0.dtype()), " but tensor ",
                   i, " is ", dtype_name(t.dtype()));
    OOMLAB_CHECK_T(DeviceError, t.device() == t0.device(), "cat: tensor 0 is on ", t0.device().str(),
                   " but tensor ", i, " is on ", t.device().str());
    bool ok = t.dim() == t0.dim();
    for (int64_t k = 0; ok && k < t.dim(); ++k) ok = k == d || t.size(k) == t0.size(k);
    OOMLAB_CHECK_T(ShapeError, ok, "cat: sizes of tensors must match except in dimension ", d, ": tensor 0 ",
                   shape_str(t0.shape()), " and tensor ", i, " ", shape_str(t.shape()));
    sizes.push_back(t.size(d));
    out_shape[d] += t.size(d);
  }
  Tensor out = Tensor::empty(out_shape, t0.dtype(), t0.device());
  const Shape ost = out.strides();
  const size_t es = dtype_size(out.dtype());
  int64_t start = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.numel() > 0 && !out.device().is_meta()) {
      CopyArgs a{};
      a.out = static_cast<char*>(out.raw_data()) + size_t(start * ost[d]) * es;
      a.out_dtype = out.dtype();
      a.in = t.raw_data();
      a.in_dtype = t.dtype();
      a.ndim = int(t.dim());
      for (int k = 0; k < a.ndim; ++k) {
        a.shape[k] = t.size(k);
        a.in_strides[k] = t.strides()[k];
        a.out_strides[k] = ost[k];
      }
      copy_kernels().launch(t.device(), t.dtype(), a);
    }
    start += sizes[i];
  }
  return attach_grad_fn(out, "cat", tensors, [&]() -> BackwardFn {
    return [sizes, d](const Tensor& g, const std::vector<bool>& needs) {
      std::vector<Tensor> grads(sizes.size());
      int64_t off = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (needs[i]) grads[i] = g.narrow(d, off, sizes[i]);
        off += sizes[i];
      }
      return grads;
    };
  });
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  OOMLAB_CHECK_T(ValueError, x.defined(), "split: undefined input");
  OOMLAB_CHECK_T(ShapeError, x.dim() > 0, "split: expected a tensor with at least one dimension");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    OOMLAB_CHECK_T(ShapeError, s >= 0, "split: split sizes must be non-negative, got ", s);
    total += s;
  }
  OOMLAB_CHECK_T(ShapeError, total == x.size(d), "split: split sizes sum to ", total, " but input ",
                 shape_str(x.shape()), " has size ", x.size(d), " in dimension ", d);
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  OOMLAB_CHECK_T(ValueError, chunks > 0, "chunk: number of chunks must be positive, got ", chunks);
  OOMLAB_CHECK_T(ValueError, x.defined(), "chunk: undefined input");
  OOMLAB_CHECK_T(ShapeError, x.dim() > 0, "chunk: expected a tensor with at least one dimension");
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.size(d);
  if (n == 0) return split(x, std::vector<int64_t>(size_t(chunks), 0), d);
  const int64_t step = (n + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t s = 0; s < n; s += step) sizes.push_back(std::min(step, n - s));
  return split(x, sizes, d);
}

}  // namespace oomlab
