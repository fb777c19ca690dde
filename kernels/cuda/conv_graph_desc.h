// conv_graph_desc.h — cuDNN backend descriptors for conv_graph.cu (internal to kernels/cuda):
// Desc owns one descriptor; step() turns a refusal into Refused (the graph path gives up on
// the problem, the legacy path runs it); tensor / convolution / operation build the three
// NCHW tensors (uids 1: x or dx, 2: w or dw, 3: y or dy), the convolution (cross-correlation,
// symmetric padding, groups implied by the filter's C / groups) and the forward,
// backward-data or backward-filter operation (alpha 1, beta 0).
#pragma once
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "engine/core/error.h"
#include "kernels/conv.h"

namespace oomlab::cudnn_graph {

// A cuDNN answer that ends the graph path for this problem (the legacy path runs instead).
struct Refused {
  std::string why;
};
inline void step(cudnnStatus_t st, const char* what) {
  if (st != CUDNN_STATUS_SUCCESS) throw Refused{str_cat(what, ": ", cudnnGetErrorString(st))};
}

class Desc {   // one owned backend descriptor
 public:
  explicit Desc(cudnnBackendDescriptorType_t type) { step(cudnnBackendCreateDescriptor(type, &d_), "create"); }
  ~Desc() {
    if (d_) (void)cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& operator=(Desc&&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  template <class T> void set(cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t type, int64_t count,
                              const T* v, const char* what) {
    step(cudnnBackendSetAttribute(d_, n, type, count, v), what);
  }
  void finalize(const char* what) { step(cudnnBackendFinalize(d_), what); }
 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

inline cudnnDataType_t data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: throw InternalError(str_cat("conv2d (cuda graph): unsupported dtype ", dtype_name(t)));
  }
}

// NCHW / KCRS contiguous, or NHWC / KRSC (channels_last: the same logical dims, channel
// stride 1), identified by uid (1: x or dx, 2: w or dw, 3: y or dy).
inline Desc tensor(int64_t uid, DType t, std::array<int64_t, 4> dims, int64_t align, bool channels_last = false) {
  Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const std::array<int64_t, 4> strides =
      channels_last ? std::array<int64_t, 4>{dims[1] * dims[2] * dims[3], 1, dims[3] * dims[1], dims[1]}
                    : std::array<int64_t, 4>{dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  const cudnnDataType_t dt = data_type(t);
  d.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor data type");
  d.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(), "tensor dimensions");
  d.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(), "tensor strides");
  d.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
  d.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
  d.finalize("tensor");
  return d;
}

inline Desc convolution(const Conv2dArgs& a, DType t) {
  Desc d(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t spatial = 2;
  const cudnnDataType_t compute = t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t dil[2] = {a.p.dil_h, a.p.dil_w}, stride[2] = {a.p.stride_h, a.p.stride_w};
  const int64_t pad[2] = {a.p.pad_h, a.p.pad_w};
  d.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial, "convolution dims");
  d.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute, "convolution compute type");
  d.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "convolution mode");
  d.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, "convolution dilations");
  d.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride, "convolution strides");
  d.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad, "convolution padding");
  d.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad, "convolution padding");
  d.finalize("convolution");
  return d;
}

// The operation of `kind` over x (or dx), w (or dw) and y (or dy); alpha 1, beta 0.
inline Desc operation(int kind, const Desc& x, const Desc& w, const Desc& y, const Desc& conv, DType t) {
  static constexpr cudnnBackendDescriptorType_t types[3] = {
      CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
      CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
  // per kind: x, w, y, convolution, alpha, beta
  static constexpr cudnnBackendAttributeName_t names[3][6] = {
      {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
      {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
       CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}};
  Desc d(types[kind]);
  const auto* n = names[kind];
  const cudnnBackendDescriptor_t xd = x.get(), wd = w.get(), yd = y.get(), cd = conv.get();
  d.set(n[0], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &xd, "operation x");
  d.set(n[1], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &wd, "operation w");
  d.set(n[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &yd, "operation y");
  d.set(n[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd, "operation convolution");
  if (t == DType::f64) {
    const double alpha = 1.0, beta = 0.0;
    d.set(n[4], CUDNN_TYPE_DOUBLE, 1, &alpha, "operation alpha");
    d.set(n[5], CUDNN_TYPE_DOUBLE, 1, &beta, "operation beta");
  } else {
    const float alpha = 1.0f, beta = 0.0f;
    d.set(n[4], CUDNN_TYPE_FLOAT, 1, &alpha, "operation alpha");
    d.set(n[5], CUDNN_TYPE_FLOAT, 1, &beta, "operation beta");
  }
  d.finalize("operation");
  return d;
}

}  // namespace oomlab::cudnn_graph
