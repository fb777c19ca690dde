// tensor_memory.cpp — the Tensor members that allocate or move data (declared in
// engine/core/tensor.h): Storage (through the device's caching allocator), the factories,
// host access, fill_ and copy_ (the copy and fill kernels).
// Host access on an accelerator (cuda) goes through a cpu tensor and copy_ (the backend's
// copy kernel): from_vector*, to_vector*, item() and integer fill_ work on any device;
// the staging tensor comes from the cpu allocator, so device traces equal meta's.
#include <cstring>

#include "engine/core/checked_math.h"
#include "engine/core/dispatch.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/core/tensor.h"
#include "engine/memory/caching_allocator.h"
#include "kernels/copy.h"
#include "kernels/elementwise.h"

namespace oomlab {

Storage::Storage(Device dev, size_t n, const char* tag) : device(dev), nbytes(n) {
  // Backends with their own memory register its factory with their kernels; allocator_for
  // does not register them itself, so make sure that happened before the first allocation.
  if (!dev.is_cpu() && !dev.is_meta()) ensure_kernels_registered();
  allocator = &allocator_for(dev);
  data = allocator->allocate(n, tag);
}

Storage::~Storage() noexcept {
  if (data) allocator->free(data);
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, const char* tag) {
  for (int64_t d : shape)
    OOMLAB_CHECK_T(ShapeError, d >= 0, "cannot create a tensor with negative dimension: ",
                   shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage =
      std::make_shared<Storage>(device, checked_nbytes(shape_numel(shape), dtype_size(dtype), "tensor"), tag);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::empty_format(const Shape& shape, DType dtype, Device device, MemoryFormat f) {
  OOMLAB_CHECK_T(ShapeError, f == MemoryFormat::contiguous || shape.size() == 4,
                 "channels_last needs a 4-D [N, C, H, W] shape, got ", shape_str(shape));
  Tensor t = empty(shape, dtype, device);   // checks the size (and the dimensions' signs) first
  if (f != MemoryFormat::contiguous) t.impl()->strides = format_strides(shape, f);
  return t;
}

Tensor empty_like(const Tensor& t, DType dtype) {
  return Tensor::empty_format(t.shape(), dtype, t.device(),
                              t.is_dense() ? t.memory_format() : MemoryFormat::contiguous);
}

Tensor empty_like(const Tensor& t) { return empty_like(t, t.dtype()); }

Tensor to_memory_format(const Tensor& t, MemoryFormat f) {
  if (t.memory_format() == f) return t;
  if (t.is_contiguous(f)) return make_view(t, t.shape(), format_strides(t.shape(), f), t.offset());
  return t.contiguous(f);
}

Tensor zeros_like(const Tensor& t) {
  Tensor z = empty_like(t);
  z.fill_(0.0);
  return z;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  OOMLAB_CHECK_T(ShapeError, int64_t(values.size()) == shape_numel(shape), "from_vector: ",
                 values.size(), " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, dtype, device);
  if (device.is_meta()) return t;
  // Accelerators: convert on the host into a cpu tensor, then one host->device copy.
  Tensor h = device.is_cpu() ? t : empty(shape, dtype, cpu_device());
  CopyArgs a{};
  a.out = h.raw_data(); a.out_dtype = dtype; a.in = values.data(); a.in_dtype = DType::f64;
  a.ndim = 1; a.shape[0] = int64_t(values.size()); a.in_strides[0] = 1; a.out_strides[0] = 1;
  copy_kernels().launch(cpu_device(), DType::f64, a);
  if (!device.is_cpu()) t.copy_(h);
  return t;
}

Tensor Tensor::from_vector_i64(const std::vector<int64_t>& values, const Shape& shape, Device device) {
  OOMLAB_CHECK_T(ShapeError, int64_t(values.size()) == shape_numel(shape), "from_vector_i64: ",
                 values.size(), " values do not fill shape ", shape_str(shape));
  Tensor t = empty(shape, DType::i64, device);
  if (device.is_meta() || values.empty()) return t;
  Tensor h = device.is_cpu() ? t : empty(shape, DType::i64, cpu_device());
  std::memcpy(h.raw_data(), values.data(), values.size() * 8);
  if (!device.is_cpu()) t.copy_(h);
  return t;
}

Tensor Tensor::uniform(const Shape& shape, double lo, double hi, DType dtype, Device device) {
  std::vector<double> v(size_t(shape_numel(shape)));
  device_generator(device).with([&](Generator& g) {
    for (double& x : v) x = lo + (hi - lo) * g.next_unit();
  });
  return from_vector(v, shape, dtype, device);
}

Tensor Tensor::normal(const Shape& shape, double mean, double std, DType dtype, Device device) {
  std::vector<double> v(size_t(shape_numel(shape)));
  device_generator(device).with([&](Generator& g) {
    for (double& x : v) x = mean + std * g.next_normal();
  });
  return from_vector(v, shape, dtype, device);
}

namespace {
// A cpu tensor with t's values (t itself when it is on cpu); meta has no values.
Tensor host_copy(const Tensor& t, const char* what) {
  OOMLAB_CHECK_T(DeviceError, !t.device().is_meta(), what, ": ", t.str(), " is on the meta device and has no values");
  if (t.device().is_cpu()) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype(), cpu_device());
  h.copy_(t);
  return h;
}
}  // namespace

std::vector<double> Tensor::to_vector() const {
  if (!device().is_cpu()) return host_copy(*this, "to_vector").to_vector();
  // Host reads must not allocate through the device allocator (meta/cpu traces agree).
  Tensor c = is_contiguous() ? *this : contiguous();
  std::vector<double> out(size_t(c.numel()));
  const void* p = c.raw_data();
  for (size_t i = 0; i < out.size(); ++i) {
    switch (c.dtype()) {
      case DType::f32: out[i] = f32_to_f64(static_cast<const float*>(p)[i]); break;
      case DType::f64: out[i] = static_cast<const double*>(p)[i]; break;
      case DType::f16: out[i] = half_to_float(static_cast<const uint16_t*>(p)[i]); break;
      case DType::bf16: out[i] = f32_to_f64(bf16_to_float(static_cast<const uint16_t*>(p)[i])); break;
      case DType::i64: out[i] = double(static_cast<const int64_t*>(p)[i]); break;
      case DType::u8: out[i] = double(static_cast<const uint8_t*>(p)[i]); break;
    }
  }
  return out;
}

std::vector<int64_t> Tensor::to_vector_i64() const {
  OOMLAB_CHECK_T(DTypeError, dtype() == DType::i64, "to_vector_i64: ", str(), " is not int64");
  if (!device().is_cpu()) return host_copy(*this, "to_vector_i64").to_vector_i64();
  Tensor c = contiguous();
  const int64_t* p = c.data<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

double Tensor::item() const {
  OOMLAB_CHECK_T(ShapeError, numel() == 1, "item(): ", str(), " has ", numel(), " elements, not 1");
  if (device().is_meta()) return 0.0;
  if (!device().is_cpu()) return host_copy(*this, "item()").item();
  return to_vector()[0];
}

void Tensor::fill_(double value) {
  OOMLAB_CHECK_T(ShapeError, is_dense(), "fill_: ", str(), " must be dense (contiguous or channels_last)");
  bump_version();
  if (dtype() == DType::i64 || dtype() == DType::u8) {
    if (device().is_meta()) return;
    if (!device().is_cpu()) {   // no integer fill kernel on accelerators: fill on the host, copy
      Tensor h = Tensor::empty(shape(), dtype(), cpu_device());
      h.fill_(value);
      copy_(h);
      return;
    }
    if (dtype() == DType::u8) { std::memset(raw_data(), int(uint8_t(value)), size_t(numel())); return; }
    int64_t* p = data<int64_t>();
    for (int64_t i = 0, n = numel(); i < n; ++i) p[i] = int64_t(value);
    return;
  }
  fill_kernels().launch(device(), dtype(), FillArgs{raw_data(), value, numel()});
}

void Tensor::copy_(const Tensor& src) {
  OOMLAB_CHECK_T(ShapeError, src.shape() == shape(), "copy_: source ", src.str(), " and destination ",
                 str(), " differ in shape");
  OOMLAB_CHECK_T(ShapeError, is_dense(), "copy_: destination ", str(), " must be dense (contiguous or channels_last)");
  OOMLAB_CHECK_T(ShapeError, dim() <= 8, "copy_: rank ", dim(), " > 8 is not supported");
  OOMLAB_CHECK_T(DeviceError, src.device().type == device().type || src.device().is_cpu() || device().is_cpu() ||
                 src.device().is_meta() || device().is_meta(),
                 "copy_: cannot copy ", src.str(), " into ", str());
  bump_version();
  if (device().is_meta() || src.device().is_meta()) return;
  CopyArgs a{};
  a.out = raw_data(); a.out_dtype = dtype(); a.in = src.raw_data(); a.in_dtype = src.dtype();
  a.ndim = int(dim());
  for (int i = 0; i < a.ndim; ++i) {
    a.shape[i] = shape()[i];
    a.in_strides[i] = src.strides()[i];
    a.out_strides[i] = strides()[i];
  }
  if (a.ndim == 0) { a.ndim = 1; a.shape[0] = 1; a.in_strides[0] = 1; a.out_strides[0] = 1; }
  // Cross-device copies are run by the non-cpu side's kernel (it knows both memories).
  Device kdev = src.device().is_cpu() ? device() : src.device();
  copy_kernels().launch(kdev, src.dtype(), a);
}

}  // namespace oomlab
