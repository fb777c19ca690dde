// tensor.cpp — what a Tensor is without memory or kernels: shapes, strides, views' metadata,
// accessors, requires_grad. Its other members are defined in the layers they need
// (the layers, scripts/check_layers.py: core sees nothing above it): storage, factories, host access,
// fill_ and copy_ in engine/memory/tensor_memory.cpp; views, contiguous(), clone() and
// to() in engine/ops/view.cpp; backward() in engine/autograd/engine.cpp.
#include "engine/core/tensor.h"

#include <cstring>
#include <sstream>

#include "engine/core/checked_math.h"
#include "engine/core/error.h"

namespace oomlab {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

int64_t shape_numel(const Shape& s) { return checked_numel(s, "tensor"); }

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) { st[i] = acc; acc *= std::max<int64_t>(shape[i], 1); }
  return st;
}

const char* memory_format_name(MemoryFormat f) {
  return f == MemoryFormat::channels_last ? "channels_last" : "contiguous";
}

Shape format_strides(const Shape& shape, MemoryFormat f) {
  if (f == MemoryFormat::contiguous) return contiguous_strides(shape);
  OOMLAB_CHECK_T(ShapeError, shape.size() == 4, "channels_last needs a 4-D [N, C, H, W] shape, got ",
                 shape_str(shape));
  auto m = [](int64_t d) { return std::max<int64_t>(d, 1); };
  const int64_t C = m(shape[1]), WC = checked_mul(m(shape[3]), C, "channels_last strides");
  return {checked_mul(m(shape[2]), WC, "channels_last strides"), 1, WC, C};
}

Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  if (d < 0) d += n;
  OOMLAB_CHECK_T(ShapeError, d >= 0 && d < n, "dimension ", d, " out of range for ", str());
  return impl_->shape[d];
}

bool strides_contiguous(const Shape& shape, const Shape& strides, MemoryFormat f) {
  if (shape_numel(shape) == 0) return f == MemoryFormat::contiguous || shape.size() == 4;   // as PyTorch
  int64_t expected = 1;
  auto step = [&](size_t d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    expected *= shape[d];
    return true;
  };
  if (f == MemoryFormat::contiguous) {
    for (size_t i = shape.size(); i-- > 0;)
      if (!step(i)) return false;
    return true;
  }
  if (shape.size() != 4) return false;
  for (size_t d : {1, 3, 2, 0})   // C innermost, then W, H, N (torch's channels-last check)
    if (!step(d)) return false;
  return true;
}

// Dense channels_last strides, judged by their order as torch's is_channels_last_strides_2d
// does, so that layouts size-1 dimensions make ambiguous follow the strides they were made
// with: [N, 1, H, W] at (HW, 1, W, 1) is channels_last, at (HW, HW, W, 1) contiguous.
MemoryFormat suggest_memory_format(const Shape& shape, const Shape& strides) {
  if (shape.size() != 4 || !strides_contiguous(shape, strides, MemoryFormat::channels_last) || strides[1] == 0)
    return MemoryFormat::contiguous;
  int64_t min = 0;
  for (size_t d : {1, 3, 2, 0}) {
    if (shape[d] == 0 || strides[d] < min) return MemoryFormat::contiguous;
    if (d == 0 && min == strides[1]) return MemoryFormat::contiguous;   // N111: torch's NCHW default
    min = shape[d] > 1 ? strides[d] * shape[d] : strides[d];
  }
  return MemoryFormat::channels_last;
}

bool Tensor::is_contiguous() const {
  return strides_contiguous(impl_->shape, impl_->strides, MemoryFormat::contiguous);
}

bool Tensor::is_contiguous(MemoryFormat f) const { return strides_contiguous(impl_->shape, impl_->strides, f); }

MemoryFormat Tensor::memory_format() const { return suggest_memory_format(impl_->shape, impl_->strides); }

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype())) + shape_str(shape()) + " on " + device().str();
}

void* Tensor::raw_data() const {
  const Storage& st = *impl_->storage;
  if (!st.data) {
    // A released storage (engine/memory/storage_resize.h: ZeRO-3 between a unit's uses) is
    // never read: a clear error, not a null pointer; meta reads no data (and null stays
    // null: no offset arithmetic on it).
    if (st.nbytes > 0 && !st.device.is_meta())
      throw Error(str_cat("the storage of ", impl_->name.empty() ? str() : impl_->name,
                          " is released (a ZeRO-3 parameter used outside its module's call)"));
    return nullptr;
  }
  return static_cast<char*>(st.data) + impl_->offset * int64_t(dtype_size(dtype()));
}

Tensor& Tensor::set_requires_grad(bool r) {
  OOMLAB_CHECK_T(AutogradError, is_leaf(), "set_requires_grad: only leaf tensors can change requires_grad (",
                 str(), " has a grad_fn)");
  OOMLAB_CHECK_T(AutogradError, !r || dtype_is_floating(dtype()), "only floating point tensors can require gradients");
  impl_->requires_grad = r;
  return *this;
}

void Tensor::zero_grad(bool set_to_none) {
  if (!impl_->grad) return;
  if (set_to_none) impl_->grad.reset();
  else Tensor(impl_->grad).fill_(0.0);
}

}  // namespace oomlab
