// tensor.h — Tensor: a shared handle to (storage, shape, strides, offset, dtype) plus
// autograd metadata.
// Contracts:
//  * Storage memory comes from the device's CachingAllocator and returns to it when the
//    last tensor viewing it dies; nothing allocates behind the allocator's back.
//  * Views (reshape of a contiguous tensor, transpose/permute, narrow) share storage;
//    kernels require contiguous inputs, ops call contiguous() (a copy when needed).
//  * The version counter lives in Storage: every in-place op bumps it, so saved tensors
//    detect modification (see autograd/saved_tensor.h).
//  * On the meta device data() is a fake address that must never be dereferenced.
//  * Memory formats (PyTorch's torch.contiguous_format / torch.channels_last): a 4-D
//    [N, C, H, W] tensor in channels_last has strides [H*W*C, 1, W*C, C] (NHWC in memory).
//    A dense tensor (contiguous in either format) spans numel() elements from raw_data(),
//    so layout-blind kernels (elementwise, optimizers, collectives) may walk it linearly,
//    pairing elements of tensors whose strides are equal.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dtype.h"

namespace oomlab {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);   // "[2, 3, 4]"
int64_t shape_numel(const Shape& s);

enum class MemoryFormat { contiguous, channels_last };
const char* memory_format_name(MemoryFormat f);   // "contiguous", "channels_last"
// The dense strides of `shape` in format f (channels_last: 4-D shapes only).
Shape format_strides(const Shape& shape, MemoryFormat f);
// Whether (shape, strides) is contiguous in format f; the format a dense layout suggests
// (torch's suggest_memory_format: channels_last for dense channels_last strides, ambiguous
// ones, where size-1 dimensions make both formats hold, judged by the strides' order).
bool strides_contiguous(const Shape& shape, const Shape& strides, MemoryFormat f);
MemoryFormat suggest_memory_format(const Shape& shape, const Shape& strides);

class CachingAllocator;
struct Node;
class Tensor;

struct Storage {
  Storage(Device device, size_t nbytes, const char* tag = "");
  ~Storage() noexcept;   // returns the memory to its allocator; never throws
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  Device device;
  void* data = nullptr;
  size_t nbytes = 0;
  CachingAllocator* allocator = nullptr;
  uint64_t version = 0;
};

// Called with the accumulated gradient of a leaf once backward has finished adding to it.
using GradReadyHook = std::function<void(Tensor& grad)>;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape, strides;
  int64_t offset = 0;              // in elements
  DType dtype = DType::f32;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;       // leaves only
  std::shared_ptr<Node> grad_fn;          // non-leaves only
  std::vector<GradReadyHook> grad_ready_hooks;
  std::string name;                       // parameters: "layer1.0.conv1.weight"
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- factories (allocate through the device's allocator) ----
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = cpu_device(),
                      const char* tag = "");
  // empty() in memory format f (the same allocation; only the strides differ).
  static Tensor empty_format(const Shape& shape, DType dtype, Device device, MemoryFormat f);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = cpu_device());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32,
                     Device device = cpu_device());
  static Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = cpu_device()) {
    return full(shape, 1.0, dtype, device);
  }
  // Host values converted to dtype (a copy); shape must match values.size().
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            DType dtype = DType::f32, Device device = cpu_device());
  static Tensor from_vector_i64(const std::vector<int64_t>& values, const Shape& shape,
                                Device device = cpu_device());
  // Random fills drawn on the host from `device`'s generator (rng.h): uniform [lo,hi), normal.
  static Tensor uniform(const Shape& shape, double lo, double hi, DType dtype = DType::f32,
                        Device device = cpu_device());
  static Tensor normal(const Shape& shape, double mean, double std, DType dtype = DType::f32,
                       Device device = cpu_device());

  // ---- metadata ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl_->shape; }
  const Shape& strides() const { return impl_->strides; }
  int64_t dim() const { return int64_t(impl_->shape.size()); }
  int64_t size(int64_t d) const;           // negative d counts from the end
  int64_t numel() const { return shape_numel(impl_->shape); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device; }
  bool is_contiguous() const;
  bool is_contiguous(MemoryFormat f) const;  // as torch's is_contiguous(memory_format=f)
  bool is_dense() const { return is_contiguous() || is_contiguous(MemoryFormat::channels_last); }
  // channels_last when this 4-D tensor has dense channels_last strides (PyTorch's
  // suggest_memory_format; see suggest_memory_format below); contiguous otherwise.
  MemoryFormat memory_format() const;
  int64_t offset() const { return impl_->offset; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  std::string str() const;  // "float32[2, 3] on cpu"

  // ---- data access (cpu only for host reads; meta: pointer must not be used) ----
  void* raw_data() const;  // storage data + offset * itemsize
  template <class T> T* data() const { return static_cast<T*>(raw_data()); }
  std::vector<double> to_vector() const;     // any floating dtype -> double (copies; cpu only)
  std::vector<int64_t> to_vector_i64() const;
  double item() const;                       // numel()==1; returns 0 on meta

  // ---- views and copies (autograd-aware, see engine/ops/view.h) ----
  Tensor reshape(const Shape& shape) const;  // -1 allowed once
  Tensor flatten(int64_t start_dim = 1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor contiguous() const;
  Tensor contiguous(MemoryFormat f) const;   // a copy in format f unless already; grad passes through
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor detach() const;                     // shares storage, no autograd history
  void copy_(const Tensor& src);             // in place, same shape, dtype conversion allowed; no autograd
  void fill_(double value);                  // in place; no autograd

  // ---- autograd ----
  bool requires_grad() const { return impl_->requires_grad; }
  Tensor& set_requires_grad(bool r);         // leaves only
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  Tensor grad() const { return impl_->grad ? Tensor(impl_->grad) : Tensor(); }
  void set_grad(const Tensor& g) { impl_->grad = g.impl_; }
  void zero_grad(bool set_to_none = true);
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }
  void backward(const Tensor& grad_output = Tensor()) const;   // run_backward (autograd/node.h)
  void register_grad_ready_hook(GradReadyHook hook) { impl_->grad_ready_hooks.push_back(std::move(hook)); }
  uint64_t version() const { return impl_->storage->version; }
  void bump_version() const { ++impl_->storage->version; }
  const std::string& name() const { return impl_->name; }
  void set_name(const std::string& n) { impl_->name = n; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

Shape contiguous_strides(const Shape& shape);
// An uninitialised tensor shaped and laid out like t (PyTorch's empty_like, preserve_format
// for dense tensors; a non-dense t gives a contiguous tensor).
Tensor empty_like(const Tensor& t);
Tensor empty_like(const Tensor& t, DType dtype);
Tensor zeros_like(const Tensor& t);
// torch's t.to(memory_format=f) without autograd (batches, parameters): t when it suggests f;
// a view with f's strides when t's elements are already in f's order (size-1 dimensions:
// [N, 1, H, W], [N, C, 1, 1]); else contiguous(f), a copy.
Tensor to_memory_format(const Tensor& t, MemoryFormat f);
// A new tensor viewing `base`'s storage with the given geometry (no autograd meta).
Tensor make_view(const Tensor& base, const Shape& shape, const Shape& strides, int64_t offset);

}  // namespace oomlab
