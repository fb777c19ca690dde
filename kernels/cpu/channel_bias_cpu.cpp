// channel_bias_cpu.cpp — CPU kernels of the NCHW channel bias (kernels/conv.h: float,
// double; float16/bfloat16 through widened float32 copies, half_widen.h). add: y[n, k, :] +=
// b[k], optionally followed by relu_forward_cpu's rule on the sum (NaN propagates). grad:
// db[k] = sum over images, then pixels, of dy[n, k, :], accumulated in double in that fixed
// order, so the bits do not depend on the thread count; channels_last buffers go to
// conv_nhwc_cpu.cpp's channel_bias_grad_rows.
#include "kernels/conv.h"
#include "kernels/cpu/conv_nhwc_cpu.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {

template <class T> void channel_bias_add_cpu(const ChannelBiasArgs& a) {
  T* y = static_cast<T*>(a.y);
  const T* b = static_cast<const T*>(a.b);
  const bool relu = a.relu;
#pragma omp parallel for collapse(2) schedule(static) if (a.N * a.K * a.HW > 32768)
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t k = 0; k < a.K; ++k) {
      T* p = y + (n * a.K + k) * a.HW;
      const T bk = b[k];
      if (relu) {   // relu_forward_cpu's rule on the sum: NaN propagates
#pragma omp simd
        for (int64_t i = 0; i < a.HW; ++i) {
          const T v = p[i] + bk;
          p[i] = (v > T(0) || v != v) ? v : T(0);
        }
      } else {
#pragma omp simd
        for (int64_t i = 0; i < a.HW; ++i) p[i] += bk;
      }
    }
}

template <class T> void channel_bias_grad_cpu(const ChannelBiasArgs& a) {
  if (a.channels_last) return channel_bias_grad_rows<T>(a);   // conv_nhwc_cpu.cpp
  const T* dy = static_cast<const T*>(a.dy);
  T* db = static_cast<T*>(a.db);
#pragma omp parallel for schedule(static) if (a.N * a.K * a.HW > 32768)
  for (int64_t k = 0; k < a.K; ++k) {
    double acc = 0.0;   // fixed order: images, then pixels
    for (int64_t n = 0; n < a.N; ++n) {
      const T* p = dy + (n * a.K + k) * a.HW;
      double s = 0.0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < a.HW; ++i) s += double(p[i]);
      acc += s;
    }
    db[k] = T(acc);
  }
}
template <DType H> void channel_bias_add_half(const ChannelBiasArgs& a) {
  Widen<H> w;
  ChannelBiasArgs f = a;
  f.y = w.inout(a.y, a.N * a.K * a.HW);
  f.b = w.in(a.b, a.K);
  run_f32(channel_bias_add_kernels(), f);
  w.narrow();
}
template <DType H> void channel_bias_grad_half(const ChannelBiasArgs& a) {
  Widen<H> w;
  ChannelBiasArgs f = a;
  f.dy = w.in(a.dy, a.N * a.K * a.HW);
  f.db = w.out(a.db, a.K);
  run_f32(channel_bias_grad_kernels(), f);
  w.narrow();
}
}  // namespace

void register_channel_bias_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(channel_bias_add_kernels(), channel_bias_add_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(channel_bias_grad_kernels(), channel_bias_grad_cpu);
  set_kernel<&channel_bias_add_half<DType::f16>>(channel_bias_add_kernels(), DeviceType::cpu, DType::f16);
  set_kernel<&channel_bias_grad_half<DType::f16>>(channel_bias_grad_kernels(), DeviceType::cpu, DType::f16);
  set_kernel<&channel_bias_add_half<DType::bf16>>(channel_bias_add_kernels(), DeviceType::cpu, DType::bf16);
  set_kernel<&channel_bias_grad_half<DType::bf16>>(channel_bias_grad_kernels(), DeviceType::cpu, DType::bf16);
}

}  // namespace oomlab
