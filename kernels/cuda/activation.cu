// activation.cu — CUDA kernels of the activation family (kernels/activation.h): relu /
// relu backward (relu_ is relu with x == y), sigmoid, gelu (erf and tanh forms), silu,
// hardswish and hardsigmoid,
// forward and backward, in float32, float64, float16 and bfloat16 (half types compute in
// float, one rounding at the store). Parity with kernels/cpu/activation_cpu.cpp: relu is
// bit-identical; sigmoid and gelu are bit-identical in float32 (the same exp_f32, the same
// Abramowitz & Stegun erf, the same fused multiply-adds — pointwise_math.cuh); float64
// uses the GPU's exp / erf (within an ulp or two of glibc's). Every kernel is a map of
// vector_map.cuh (16-byte accesses where aligned, same results).
#include "kernels/activation.h"
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/cuda/vector_map.cuh"

namespace oomlab {
namespace {
using namespace cuda;

// Per-element ops (vector_map.cuh runs them scalar or 16 bytes at a time, same bits).
template <class T> struct ReluFwd {
  __device__ T operator()(T v) const {
    const compute_t<T> f = ld(v);
    return (f > 0 || f != f) ? v : st<T>(0);  // NaN propagates, as torch.relu
  }
};
template <class T> struct ReluBwd {   // (y, dy) -> dx
  __device__ T operator()(T y, T dy) const { return ld(y) <= 0 ? st<T>(0) : dy; }
};
template <class T> struct AddRelu {   // (a, b) -> relu(a + b), one rounding of the sum as axpby's
  __device__ T operator()(T a, T b) const {
    const compute_t<T> f = ld(st<T>(add_rn(ld(a), ld(b))));
    return (f > 0 || f != f) ? st<T>(f) : st<T>(0);
  }
};
template <class T> struct SigmoidFwd {
  __device__ T operator()(T x) const { return st<T>(sigmoid_fwd(ld(x))); }
};
template <class T> struct SigmoidBwd {   // (y, dy) -> dx
  __device__ T operator()(T y, T dy) const { return st<T>(sigmoid_bwd(ld(y), ld(dy))); }
};
template <class T> struct GeluFwd {
  bool tanh_approx;
  __device__ T operator()(T x) const { return st<T>(gelu_fwd(ld(x), tanh_approx)); }
};
template <class T> struct GeluBwd {   // (x, dy) -> dx
  bool tanh_approx;
  __device__ T operator()(T x, T dy) const { return st<T>(gelu_bwd(ld(x), ld(dy), tanh_approx)); }
};

template <class T> void relu_forward_cuda(const ReluArgs& a) {
  if (a.n == 0) return;
  map1(Launch("relu"), static_cast<T*>(a.y), static_cast<const T*>(a.x), a.n, ReluFwd<T>{});
}
template <class T> void relu_backward_cuda(const ReluArgs& a) {
  if (a.n == 0) return;
  map2(Launch("relu_backward"), static_cast<T*>(a.dx), static_cast<const T*>(a.y), static_cast<const T*>(a.dy), a.n,
       ReluBwd<T>{});
}
template <class T> void add_relu_cuda(const AddReluArgs& a) {
  if (a.n == 0) return;
  map2(Launch("add_relu"), static_cast<T*>(a.y), static_cast<const T*>(a.a), static_cast<const T*>(a.b), a.n,
       AddRelu<T>{});
}
template <class T> void sigmoid_forward_cuda(const SigmoidArgs& a) {
  if (a.n == 0) return;
  map1(Launch("sigmoid"), static_cast<T*>(a.y), static_cast<const T*>(a.x), a.n, SigmoidFwd<T>{});
}
template <class T> void sigmoid_backward_cuda(const SigmoidArgs& a) {
  if (a.n == 0) return;
  map2(Launch("sigmoid_backward"), static_cast<T*>(a.dx), static_cast<const T*>(a.y), static_cast<const T*>(a.dy),
       a.n, SigmoidBwd<T>{});
}
template <class T> void gelu_forward_cuda(const GeluArgs& a) {
  if (a.n == 0) return;
  map1(Launch("gelu"), static_cast<T*>(a.y), static_cast<const T*>(a.x), a.n, GeluFwd<T>{a.tanh_approx});
}
template <class T> void gelu_backward_cuda(const GeluArgs& a) {
  if (a.n == 0) return;
  map2(Launch("gelu_backward"), static_cast<T*>(a.dx), static_cast<const T*>(a.x), static_cast<const T*>(a.dy), a.n,
       GeluBwd<T>{a.tanh_approx});
}
// silu / hardswish / hardsigmoid: a functor each way over a formula of pointwise_math.cuh.
#define OOMLAB_ACT_CUDA(name, label)                                                             \
  template <class T> struct name##Fwd {                                                        \
    __device__ T operator()(T x) const { return st<T>(name##_fwd(ld(x))); }                    \
  };                                                                                           \
  template <class T> struct name##Bwd {   /* (x, dy) -> dx */                                  \
    __device__ T operator()(T x, T dy) const { return st<T>(name##_bwd(ld(x), ld(dy))); }      \
  };                                                                                           \
  template <class T> void name##_forward_cuda(const ActArgs& a) {                              \
    if (a.n == 0) return;                                                                      \
    map1(Launch(label), static_cast<T*>(a.y), static_cast<const T*>(a.x), a.n, name##Fwd<T>{}); \
  }                                                                                            \
  template <class T> void name##_backward_cuda(const ActArgs& a) {                             \
    if (a.n == 0) return;                                                                      \
    map2(Launch(label "_backward"), static_cast<T*>(a.dx), static_cast<const T*>(a.x),         \
         static_cast<const T*>(a.dy), a.n, name##Bwd<T>{});                                    \
  }
OOMLAB_ACT_CUDA(silu, "silu")
OOMLAB_ACT_CUDA(hardswish, "hardswish")
OOMLAB_ACT_CUDA(hardsigmoid, "hardsigmoid")
#undef OOMLAB_ACT_CUDA
}  // namespace

void register_activation_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(relu_forward_kernels(), relu_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(relu_backward_kernels(), relu_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(add_relu_kernels(), add_relu_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(sigmoid_forward_kernels(), sigmoid_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(sigmoid_backward_kernels(), sigmoid_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(gelu_forward_kernels(), gelu_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(gelu_backward_kernels(), gelu_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(silu_forward_kernels(), silu_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(silu_backward_kernels(), silu_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(hardswish_forward_kernels(), hardswish_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(hardswish_backward_kernels(), hardswish_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(hardsigmoid_forward_kernels(), hardsigmoid_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(hardsigmoid_backward_kernels(), hardsigmoid_backward_cuda);
}

}  // namespace oomlab
