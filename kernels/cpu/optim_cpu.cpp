// optim_cpu.cpp — CPU kernels for the fused optimizer updates (float32, float64).
// Each kernel makes one pass over a parameter, its grad and its state, computing in T
// in PyTorch's single-tensor operation order (see engine/optim/optim_kernels.h).
// OpenMP with a static schedule above 32768 elements; purely elementwise, so the result
// does not depend on the thread count.
#include <cmath>

#include "engine/optim/optim_kernels.h"

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

template <class T> void adam_step_cpu(const AdamArgs& a) {
  T* p = static_cast<T*>(a.param);
  const T* g = static_cast<const T*>(a.grad);
  T* m = static_cast<T*>(a.exp_avg);
  T* v = static_cast<T*>(a.exp_avg_sq);
  const T w1 = T(1.0 - a.beta1), beta2 = T(a.beta2), w2 = T(1.0 - a.beta2);
  const T wd = T(a.weight_decay), shrink = T(1.0 - a.lr * a.weight_decay);
  const T step_size = T(a.step_size), bc2_sqrt = T(a.bias_correction2_sqrt), eps = T(a.eps);
  const bool decoupled = a.decoupled, decay = a.weight_decay != 0;
  const bool lerp_low = w1 < T(0.5);   // torch.lerp's two-branch formula
#pragma omp parallel for simd schedule(static) if (a.n > 32768)
  for (int64_t i = 0; i < a.n; ++i) {
    T pi = p[i], gi = g[i];
    if (decay) {
      if (decoupled) pi = pi * shrink;
      else gi = gi + wd * pi;
    }
    T mi = m[i];
    mi = lerp_low ? mi + w1 * (gi - mi) : gi - (gi - mi) * (T(1) - w1);
    T vi = v[i] * beta2 + w2 * gi * gi;
    T denom = std::sqrt(vi) / bc2_sqrt + eps;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * (mi / denom);
  }
}
}  // namespace

void register_optim_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(sgd_kernels(), sgd_step_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(adam_kernels(), adam_step_cpu);
}

}  // namespace oomlab
