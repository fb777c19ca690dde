// activation_cpu.cpp — CPU kernels of the activation family (kernels/activation.h): relu
// (backward: threshold at y <= 0), sigmoid (backward from the saved output), gelu (erf
// and tanh forms), silu, hardswish and hardsigmoid, forward and backward, float32 and float64. OpenMP over elements
// (static schedule; gelu in fixed chunks), purely elementwise, so results do not depend on
// the thread count. float exps use exp_f32 (fast_math.h: vectorisable, ~1 ulp), double
// exps std::exp.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/activation.h"
#include "kernels/cpu/half_widen.h"
#include "kernels/cpu/fast_math.h"

namespace oomlab {
namespace {
constexpr int64_t kParallelMin = 32768;   // elements below which a kernel stays serial

// ---- relu ---------------------------------------------------------------------------
template <class T> void relu_forward_cpu(const ReluArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
#pragma omp parallel for simd schedule(static) if (a.n > kParallelMin)
  for (int64_t i = 0; i < a.n; ++i) {
    T v = x[i];
    y[i] = (v > T(0) || v != v) ? v : T(0);   // NaN propagates, as torch.relu
  }
}

template <class T> void add_relu_cpu(const AddReluArgs& a) {
  const T* x = static_cast<const T*>(a.a);
  const T* r = static_cast<const T*>(a.b);
  T* y = static_cast<T*>(a.y);
#pragma omp parallel for simd schedule(static) if (a.n > kParallelMin)
  for (int64_t i = 0; i < a.n; ++i) {
    T v = x[i] + r[i];
    y[i] = (v > T(0) || v != v) ? v : T(0);
  }
}

template <class T> void relu_backward_cpu(const ReluArgs& a) {
  const T* y = static_cast<const T*>(a.y);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
#pragma omp parallel for simd schedule(static) if (a.n > kParallelMin)
  for (int64_t i = 0; i < a.n; ++i) dx[i] = y[i] <= T(0) ? T(0) : dy[i];   // threshold_backward
}

// ---- sigmoid -----------------------------------------------------------------------
template <class T> void sigmoid_forward_cpu(const SigmoidArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
#pragma omp parallel for schedule(static) if (a.n > kParallelMin)
  for (int64_t i = 0; i < a.n; ++i) y[i] = T(1) / (T(1) + exp_t(-x[i]));
}
template <class T> void sigmoid_backward_cpu(const SigmoidArgs& a) {
  const T* y = static_cast<const T*>(a.y);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
#pragma omp parallel for simd schedule(static) if (a.n > kParallelMin)
  for (int64_t i = 0; i < a.n; ++i) dx[i] = dy[i] * (T(1) - y[i]) * y[i];
}

// ---- vectorisable exp / erf -------------------------------------------------------------
// glibc's expf / erff are scalar calls, so float32 uses inline versions GCC vectorises:
// exp = exp_f32 (kernels/cpu/fast_math.h, <= 1 ulp); erf by
// Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7 + rounding), the form PyTorch's AVX2
// Vectorized<float>::erf uses. float64 calls std::exp / std::erf (gradcheck precision).
// Loops are kept separate (clamp, exp, use) so every one of them vectorises.
constexpr int64_t kElemChunk = 4096;   // elements per task in elementwise kernels

// erf(z) given e = exp(-z^2) (float32: A&S 7.1.26; float64: std::erf).
template <class T> inline T erf_with_exp(T z, T e) {
  if constexpr (std::is_same_v<T, float>) {
    const float t = 1.0f / (1.0f + 0.3275911f * std::fabs(z));
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    return std::copysign(1.0f - p * t * e, z);
  } else {
    return std::erf(z);
  }
}

// ---- gelu -----------------------------------------------------------------------------
constexpr double kSqrt1_2 = 0.70710678118654752440;      // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluCoef = 0.044715;

// erf form: e = exp(-x^2/2) serves erf(x/sqrt2) and the normal pdf.
// tanh form: tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2|u|), u = sqrt(2/pi)(x + c x^3).
template <class T> inline T gelu_exp_arg(T v, bool tanh_approx) {
  if (!tanh_approx) return T(-0.5) * v * v;
  return T(-2) * std::fabs(T(kSqrt2OverPi) * (v + T(kGeluCoef) * v * v * v));
}
template <class T> inline T tanh_with_exp(T v, T e) {
  return std::copysign((T(1) - e) / (T(1) + e), v);   // u has the sign of v
}

// out[i] holds exp(gelu_exp_arg(x[i])) on entry to f(i); f writes the result.
template <class T, class F> void gelu_chunks(const T* x, T* out, int64_t n, bool tanh_approx, F f) {
  const int64_t nchunks = (n + kElemChunk - 1) / kElemChunk;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t ch = 0; ch < nchunks; ++ch) {
    const int64_t i0 = ch * kElemChunk, i1 = std::min(n, i0 + kElemChunk);
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) out[i] = gelu_exp_arg(x[i], tanh_approx);
    exp_nonpos(out + i0, i1 - i0);
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) out[i] = f(i, out[i]);
  }
}

template <class T> void gelu_forward_cpu(const GeluArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  if (a.tanh_approx)
    gelu_chunks(x, y, a.n, true, [x](int64_t i, T e) { return T(0.5) * x[i] * (T(1) + tanh_with_exp(x[i], e)); });
  else
    gelu_chunks(x, y, a.n, false, [x](int64_t i, T e) {
      return T(0.5) * x[i] * (T(1) + erf_with_exp(x[i] * T(kSqrt1_2), e));
    });
}

template <class T> void gelu_backward_cpu(const GeluArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
  if (a.tanh_approx) {
    // d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 c x^2)
    gelu_chunks(x, dx, a.n, true, [x, dy](int64_t i, T e) {
      const T v = x[i], t = tanh_with_exp(v, e);
      const T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCoef) * v * v);
      return dy[i] * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * du);
    });
  } else {
    // d/dx = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi)
    gelu_chunks(x, dx, a.n, false, [x, dy](int64_t i, T e) {
      const T v = x[i];
      const T cdf = T(0.5) * (T(1) + erf_with_exp(v * T(kSqrt1_2), e));
      return dy[i] * (cdf + v * T(kInvSqrt2Pi) * e);
    });
  }
}
// ---- silu, hardswish, hardsigmoid (backward from the saved input) -------------------------
template <class T> void silu_forward_cpu(const ActArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
#pragma omp parallel for schedule(static) if (a.n > kParallelMin)
  for (int64_t i = 0; i < a.n; ++i) y[i] = x[i] / (T(1) + exp_t(-x[i]));
}
template <class T> void silu_backward_cpu(const ActArgs& a) {   // dy * s * (1 + x * (1 - s))
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
#pragma omp parallel for schedule(static) if (a.n > kParallelMin)
  for (int64_t i = 0; i < a.n; ++i) {
    const T s = T(1) / (T(1) + exp_t(-x[i]));
    dx[i] = dy[i] * s * (T(1) + x[i] * (T(1) - s));
  }
}
template <class T> void hardswish_forward_cpu(const ActArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
#pragma omp parallel for simd schedule(static) if (a.n > kParallelMin)
  for (int64_t i = 0; i < a.n; ++i) y[i] = x[i] * std::min(std::max(x[i] + T(3), T(0)), T(6)) / T(6);
}
template <class T> void hardswish_backward_cpu(const ActArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
#pragma omp parallel for simd schedule(static) if (a.n > kParallelMin)
  for (int64_t i = 0; i < a.n; ++i)
    dx[i] = x[i] < T(-3) ? T(0) : x[i] <= T(3) ? dy[i] * (x[i] / T(3) + T(0.5)) : dy[i];
}
template <class T> void hardsigmoid_forward_cpu(const ActArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
#pragma omp parallel for simd schedule(static) if (a.n > kParallelMin)
  for (int64_t i = 0; i < a.n; ++i) y[i] = std::min(std::max(x[i] + T(3), T(0)), T(6)) / T(6);
}
template <class T> void hardsigmoid_backward_cpu(const ActArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
#pragma omp parallel for simd schedule(static) if (a.n > kParallelMin)
  for (int64_t i = 0; i < a.n; ++i) dx[i] = (x[i] > T(-3) && x[i] < T(3)) ? dy[i] / T(6) : T(0);
}
// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
// (relu / sigmoid / gelu / silu / hardswish / hardsigmoid share the field names; forward
// reads x, writes y; backward reads y (relu, sigmoid) or x (the others) and dy, writes dx.)
template <DType H, class Args, KernelTable<Args>& (*Table)(), bool Backward> void pointwise_half(const Args& a) {
  Widen<H> w;
  Args f = a;
  if (!Backward) {
    f.x = w.in(a.x, a.n);
    f.y = w.out(a.y, a.n);
  } else {
    f.x = w.in(a.x, a.n);
    f.y = const_cast<float*>(w.in(a.y, a.n));   // read only in backward
    f.dy = w.in(a.dy, a.n);
    f.dx = w.out(a.dx, a.n);
  }
  run_f32(Table(), f);
  w.narrow();
}

template <DType H> void add_relu_half(const AddReluArgs& a) {
  Widen<H> w;
  AddReluArgs f = a;
  f.a = w.in(a.a, a.n);
  f.b = w.in(a.b, a.n);
  f.y = w.out(a.y, a.n);
  run_f32(add_relu_kernels(), f);
  w.narrow();
}

template <DType H> void register_activation_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&pointwise_half<H, ReluArgs, relu_forward_kernels, false>>(relu_forward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, ReluArgs, relu_backward_kernels, true>>(relu_backward_kernels(), cpu, H);
  set_kernel<&add_relu_half<H>>(add_relu_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, SigmoidArgs, sigmoid_forward_kernels, false>>(sigmoid_forward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, SigmoidArgs, sigmoid_backward_kernels, true>>(sigmoid_backward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, GeluArgs, gelu_forward_kernels, false>>(gelu_forward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, GeluArgs, gelu_backward_kernels, true>>(gelu_backward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, ActArgs, silu_forward_kernels, false>>(silu_forward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, ActArgs, silu_backward_kernels, true>>(silu_backward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, ActArgs, hardswish_forward_kernels, false>>(hardswish_forward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, ActArgs, hardswish_backward_kernels, true>>(hardswish_backward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, ActArgs, hardsigmoid_forward_kernels, false>>(hardsigmoid_forward_kernels(), cpu, H);
  set_kernel<&pointwise_half<H, ActArgs, hardsigmoid_backward_kernels, true>>(hardsigmoid_backward_kernels(), cpu, H);
}
}  // namespace

void register_activation_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(relu_forward_kernels(), relu_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(relu_backward_kernels(), relu_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(add_relu_kernels(), add_relu_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(sigmoid_forward_kernels(), sigmoid_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(sigmoid_backward_kernels(), sigmoid_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(gelu_forward_kernels(), gelu_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(gelu_backward_kernels(), gelu_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(silu_forward_kernels(), silu_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(silu_backward_kernels(), silu_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(hardswish_forward_kernels(), hardswish_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(hardswish_backward_kernels(), hardswish_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(hardsigmoid_forward_kernels(), hardsigmoid_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(hardsigmoid_backward_kernels(), hardsigmoid_backward_cpu);
  register_activation_half<DType::f16>();
  register_activation_half<DType::bf16>();
}

}  // namespace oomlab
