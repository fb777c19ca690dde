// optim_cpu.cpp — CPU kernels for the fused optimizer updates (float32, float64; float16 and
// bfloat16 below, widened: half_widen.h) and GradScaler's unscale + inf check (all four float types);
// a group's foreach update is its parameters' kernels in order (kernels/optim.h).
// Each kernel makes one pass over a parameter, its grad and its state, computing in T
// in PyTorch's single-tensor operation order (see kernels/optim.h).
// OpenMP with a static schedule above 32768 elements; purely elementwise, so the result
// does not depend on the thread count.
#include <cmath>

#include "kernels/optim.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {
template <class T> void sgd_step_cpu(const SgdArgs& a) {
  T* p = static_cast<T*>(a.param);
  const T* g = static_cast<const T*>(a.grad);
  T* buf = static_cast<T*>(a.buf);
  const T lr = T(a.lr), wd = T(a.weight_decay), mom = T(a.momentum), keep = T(1.0 - a.dampening);
  const bool decay = a.weight_decay != 0;
  if (buf == nullptr) {
#pragma omp parallel for simd schedule(static) if (a.n > 32768)
    for (int64_t i = 0; i < a.n; ++i) {
      T d = decay ? g[i] + wd * p[i] : g[i];
      p[i] = p[i] - lr * d;
    }
    return;
  }
  const bool first = a.first_step, nesterov = a.nesterov;
#pragma omp parallel for simd schedule(static) if (a.n > 32768)
  for (int64_t i = 0; i < a.n; ++i) {
    T d = decay ? g[i] + wd * p[i] : g[i];
    T b = first ? d : buf[i] * mom + keep * d;
    buf[i] = b;
    T step = nesterov ? d + mom * b : b;
    p[i] = p[i] - lr * step;
  }
}

// The flags are template parameters so the inner loop has no branches. (GCC vectorizes
// it only with -fno-math-errno: otherwise each std::sqrt keeps an errno branch.)
template <class T, bool Decay, bool Decoupled, bool LerpLow>
void adam_loop(const AdamArgs& a) {
  T* p = static_cast<T*>(a.param);
  const T* g = static_cast<const T*>(a.grad);
  T* m = static_cast<T*>(a.exp_avg);
  T* v = static_cast<T*>(a.exp_avg_sq);
  const T w1 = T(1.0 - a.beta1), beta2 = T(a.beta2), w2 = T(1.0 - a.beta2);
  const T wd = T(a.weight_decay), shrink = T(1.0 - a.lr * a.weight_decay);
  const T step_size = T(a.step_size), bc2_sqrt = T(a.bias_correction2_sqrt), eps = T(a.eps);
#pragma omp parallel for simd schedule(static) if (a.n > 32768)
  for (int64_t i = 0; i < a.n; ++i) {
    T pi = p[i], gi = g[i];
    if constexpr (Decay && Decoupled) pi = pi * shrink;
    if constexpr (Decay && !Decoupled) gi = gi + wd * pi;
    T mi = m[i];
    if constexpr (LerpLow) mi = mi + w1 * (gi - mi);          // torch.lerp's two branches
    else mi = gi - (gi - mi) * (T(1) - w1);
    T vi = v[i] * beta2 + w2 * gi * gi;
    T denom = std::sqrt(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / denom);
  }
}

// Unscale in the compute type C (float for float / 16-bit storage, double for double);
// S is the stored type (uint16_t bit patterns for 16-bit grads, converted by Load / Store).
template <class S, class C, C (*Load)(S), S (*Store)(C)> void unscale_cpu(const UnscaleArgs& a) {
  S* g = static_cast<S*>(a.grad);
  const C inv = C(float(a.inv_scale));
  int bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (a.n > 32768)
  for (int64_t i = 0; i < a.n; ++i) {
    const C v = Load(g[i]);
    bad |= !std::isfinite(v);
    g[i] = Store(v * inv);
  }
  if (bad) *a.found_inf = 1.0f;
}
template <class T> T same(T v) { return v; }

template <class T> void adam_step_cpu(const AdamArgs& a) {
  const bool decay = a.weight_decay != 0, low = (1.0 - a.beta1) < 0.5;
  if (!decay) return low ? adam_loop<T, false, false, true>(a) : adam_loop<T, false, false, false>(a);
  if (a.decoupled) return low ? adam_loop<T, true, true, true>(a) : adam_loop<T, true, true, false>(a);
  return low ? adam_loop<T, true, false, true>(a) : adam_loop<T, true, false, false>(a);
}
// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
template <DType H> void sgd_half(const SgdArgs& a) {
  Widen<H> w;
  SgdArgs f = a;
  f.param = w.inout(a.param, a.n);
  f.grad = w.in(a.grad, a.n);
  f.buf = w.inout(a.buf, a.n);
  run_f32(sgd_kernels(), f);
  w.narrow();
}
template <DType H> void adam_half(const AdamArgs& a) {
  Widen<H> w;
  AdamArgs f = a;
  f.param = w.inout(a.param, a.n);
  f.grad = w.in(a.grad, a.n);
  f.exp_avg = w.inout(a.exp_avg, a.n);
  f.exp_avg_sq = w.inout(a.exp_avg_sq, a.n);
  run_f32(adam_kernels(), f);
  w.narrow();
}

template <DType H> void register_optim_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&sgd_half<H>>(sgd_kernels(), cpu, H);
  set_kernel<&adam_half<H>>(adam_kernels(), cpu, H);
}
}  // namespace

void register_optim_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(sgd_kernels(), sgd_step_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(adam_kernels(), adam_step_cpu);
  set_kernel<&unscale_cpu<float, float, same<float>, same<float>>>(amp_unscale_kernels(), DeviceType::cpu, DType::f32);
  set_kernel<&unscale_cpu<double, double, same<double>, same<double>>>(amp_unscale_kernels(), DeviceType::cpu,
                                                                       DType::f64);
  set_kernel<&unscale_cpu<uint16_t, float, half_to_float, float_to_half>>(amp_unscale_kernels(), DeviceType::cpu,
                                                                          DType::f16);
  set_kernel<&unscale_cpu<uint16_t, float, bf16_to_float, float_to_bf16>>(amp_unscale_kernels(), DeviceType::cpu,
                                                                          DType::bf16);
  register_optim_half<DType::f16>();
  register_optim_half<DType::bf16>();
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16}) {   // a group: its parameters in order
    set_kernel<&foreach_per_item<SgdArgs, &sgd_kernels>>(sgd_foreach_kernels(), DeviceType::cpu, t);
    set_kernel<&foreach_per_item<AdamArgs, &adam_kernels>>(adam_foreach_kernels(), DeviceType::cpu, t);
  }
}

}  // namespace oomlab
