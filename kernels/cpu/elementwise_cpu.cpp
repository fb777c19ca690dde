// elementwise_cpu.cpp — CPU kernels for axpby / mul / sum / fill / pow (float32, float64;
// axpby also int64; float16 / bfloat16 through float32 copies).
// OpenMP over elements with a static schedule; sums use per-thread double partials
// combined in thread order over a fixed chunking, so results do not depend on the
// thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/elementwise.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {
template <class T> void axpby_cpu(const AxpbyArgs& a) {
  T* out = static_cast<T*>(a.out);
  const T* x = static_cast<const T*>(a.a);
  const T* y = static_cast<const T*>(a.b);
  const T alpha = T(a.alpha), beta = T(a.beta), gamma = T(a.gamma);
  if (y) {
#pragma omp parallel for simd schedule(static) if (a.n > 32768)
    for (int64_t i = 0; i < a.n; ++i) out[i] = alpha * x[i] + beta * y[i] + gamma;
  } else {
#pragma omp parallel for simd schedule(static) if (a.n > 32768)
    for (int64_t i = 0; i < a.n; ++i) out[i] = alpha * x[i] + gamma;
  }
}

template <class T> void mul_cpu(const MulArgs& a) {
  T* out = static_cast<T*>(a.out);
  const T* x = static_cast<const T*>(a.a);
  const T* y = static_cast<const T*>(a.b);
  const T alpha = T(a.alpha);
#pragma omp parallel for simd schedule(static) if (a.n > 32768)
  for (int64_t i = 0; i < a.n; ++i) out[i] = x[i] * y[i] * alpha;
}

template <class T> void sum_cpu(const SumArgs& a) {
  const T* x = static_cast<const T*>(a.a);
  constexpr int64_t kChunk = 16384;   // fixed chunking -> thread-count independent result
  int64_t nchunks = (a.n + kChunk - 1) / kChunk;
  std::vector<double> partial(size_t(std::max<int64_t>(nchunks, 1)), 0.0);
#pragma omp parallel for schedule(static) if (nchunks > 4)
  for (int64_t c = 0; c < nchunks; ++c) {
    double s = 0.0;
    for (int64_t i = c * kChunk, e = std::min(a.n, (c + 1) * kChunk); i < e; ++i) s += double(x[i]);
    partial[size_t(c)] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  *static_cast<T*>(a.out) = T(total * a.alpha);
}

template <class T> void fill_cpu(const FillArgs& a) {
  T* out = static_cast<T*>(a.out);
  std::fill(out, out + a.n, T(a.value));
}
template <class T> void pow_forward_cpu(const PowArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const T e = T(a.exponent);
#pragma omp parallel for schedule(static) if (a.n > 32768)
  for (int64_t i = 0; i < a.n; ++i) y[i] = std::pow(x[i], e);
}
template <class T> void pow_backward_cpu(const PowArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
  const T e = T(a.exponent);
#pragma omp parallel for schedule(static) if (a.n > 32768)
  for (int64_t i = 0; i < a.n; ++i) dx[i] = e == T(0) ? T(0) : dy[i] * (e * std::pow(x[i], e - T(1)));
}
// fill for a 16-bit type: value rounded once by `narrow` (float -> bits).
template <uint16_t (*narrow)(float)> void fill_low_cpu(const FillArgs& a) {
  const uint16_t h = narrow(float(a.value));
  std::fill(static_cast<uint16_t*>(a.out), static_cast<uint16_t*>(a.out) + a.n, h);
}
// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
template <DType H> void axpby_half(const AxpbyArgs& a) {
  Widen<H> w;
  AxpbyArgs f = a;
  f.a = w.in(a.a, a.n);
  f.b = w.in(a.b, a.n);
  f.out = w.out(a.out, a.n);
  run_f32(axpby_kernels(), f);
  w.narrow();
}
template <DType H> void mul_half(const MulArgs& a) {
  Widen<H> w;
  MulArgs f = a;
  f.a = w.in(a.a, a.n);
  f.b = w.in(a.b, a.n);
  f.out = w.out(a.out, a.n);
  run_f32(mul_kernels(), f);
  w.narrow();
}
template <DType H> void sum_half(const SumArgs& a) {
  Widen<H> w;
  SumArgs f = a;
  f.a = w.in(a.a, a.n);
  f.out = w.out(a.out, 1);
  run_f32(sum_kernels(), f);
  w.narrow();
}

template <DType H> void pow_forward_half(const PowArgs& a) {
  Widen<H> w;
  PowArgs f = a;
  f.x = w.in(a.x, a.n);
  f.y = w.overwritten_out(a.y, a.n);
  run_f32(pow_forward_kernels(), f);
  w.narrow();
}
template <DType H> void pow_backward_half(const PowArgs& a) {
  Widen<H> w;
  PowArgs f = a;
  f.x = w.in(a.x, a.n);
  f.dy = w.in(a.dy, a.n);
  f.dx = w.overwritten_out(a.dx, a.n);
  run_f32(pow_backward_kernels(), f);
  w.narrow();
}

template <DType H> void register_elementwise_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&axpby_half<H>>(axpby_kernels(), cpu, H);
  set_kernel<&mul_half<H>>(mul_kernels(), cpu, H);
  set_kernel<&sum_half<H>>(sum_kernels(), cpu, H);
  set_kernel<&pow_forward_half<H>>(pow_forward_kernels(), cpu, H);
  set_kernel<&pow_backward_half<H>>(pow_backward_kernels(), cpu, H);
}
}  // namespace

void register_elementwise_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(axpby_kernels(), axpby_cpu);
  set_kernel<&axpby_cpu<int64_t>>(axpby_kernels(), DeviceType::cpu, DType::i64);
  OOMLAB_REGISTER_FLOAT_CPU(mul_kernels(), mul_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(sum_kernels(), sum_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(fill_kernels(), fill_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(pow_forward_kernels(), pow_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(pow_backward_kernels(), pow_backward_cpu);
  set_kernel<&fill_low_cpu<float_to_half>>(fill_kernels(), DeviceType::cpu, DType::f16);
  set_kernel<&fill_low_cpu<float_to_bf16>>(fill_kernels(), DeviceType::cpu, DType::bf16);
  register_elementwise_half<DType::f16>();
  register_elementwise_half<DType::bf16>();
}

}  // namespace oomlab
