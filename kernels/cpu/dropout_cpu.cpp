// dropout_cpu.cpp — CPU kernels of the dropout family (kernels/dropout.h), float32 and
// float64. Element i keeps iff uint_to_unit_float(Generator::block(seed, base, i / 4)[i % 4])
// >= p, so the mask depends only on (seed, base, i), never on the thread count. As
// PyTorch, y = x * mask * (1/(1-p)) (a multiply, so inf/NaN inputs give NaN where dropped);
// the forward writes the uint8 mask when given (may be null); the backward computes
// dx = dy * mask * (1/(1-p)). Philox runs on batches of 64 blocks in structure-of-arrays
// form so it vectorises; OpenMP over batches (forward) or elements (backward).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/dropout.h"
#include "kernels/cpu/philox_cpu.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {
constexpr int64_t kParallelMin = 32768;

template <class T> void dropout_forward_cpu(const DropoutArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  uint8_t* mask = a.mask;
  const T scale = T(1.0 / (1.0 - a.p));
  // uint_to_unit_float(w) >= p  <=>  (w >> 8) >= ceil(p * 2^24)  (exact: 24-bit uniforms)
  const uint32_t thr = uint32_t(std::ceil(a.p * 16777216.0));
  const int64_t nblocks = (a.n + 3) / 4, nbatches = (nblocks + kPhiloxBatch - 1) / kPhiloxBatch;
#pragma omp parallel for schedule(static) if (a.n > kParallelMin / 4)
  for (int64_t bt = 0; bt < nbatches; ++bt) {
    uint32_t words[4 * kPhiloxBatch];
    const int64_t b0 = bt * kPhiloxBatch, nb = std::min(kPhiloxBatch, nblocks - b0);
    philox_words(a.seed, a.base + uint64_t(b0), nb, words);
    uint8_t keep[4 * kPhiloxBatch];
#pragma omp simd
    for (int64_t e = 0; e < 4 * nb; ++e) keep[e] = uint8_t((words[e] >> 8) >= thr);
    const int64_t i0 = b0 * 4, m = std::min(nb * 4, a.n - i0);
#pragma omp simd
    for (int64_t e = 0; e < m; ++e) y[i0 + e] = x[i0 + e] * (T(keep[e]) * scale);
    if (mask) std::memcpy(mask + i0, keep, size_t(m));
  }
}

template <class T> void dropout_backward_cpu(const DropoutArgs& a) {
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
  const uint8_t* mask = a.mask;
  const T scale = T(1.0 / (1.0 - a.p));
#pragma omp parallel for simd schedule(static) if (a.n > kParallelMin)
  for (int64_t i = 0; i < a.n; ++i) dx[i] = dy[i] * (T(mask[i]) * scale);
}
// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
template <DType H> void dropout_forward_half(const DropoutArgs& a) {
  Widen<H> w;
  DropoutArgs f = a;
  f.x = w.in(a.x, a.n);
  f.y = w.out(a.y, a.n);
  run_f32(dropout_forward_kernels(), f);
  w.narrow();
}
template <DType H> void dropout_backward_half(const DropoutArgs& a) {
  Widen<H> w;
  DropoutArgs f = a;
  f.dy = w.in(a.dy, a.n);
  f.dx = w.out(a.dx, a.n);
  run_f32(dropout_backward_kernels(), f);
  w.narrow();
}

template <DType H> void register_dropout_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&dropout_forward_half<H>>(dropout_forward_kernels(), cpu, H);
  set_kernel<&dropout_backward_half<H>>(dropout_backward_kernels(), cpu, H);
}
}  // namespace

void register_dropout_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(dropout_forward_kernels(), dropout_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(dropout_backward_kernels(), dropout_backward_cpu);
  register_dropout_half<DType::f16>();
  register_dropout_half<DType::bf16>();
}

}  // namespace oomlab
