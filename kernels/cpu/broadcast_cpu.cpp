// broadcast_cpu.cpp — CPU kernels of the broadcast family (kernels/broadcast.h): the
// strided binary op (add, sub, mul, div) and sum_to, float32 and float64, and float16 /
// bfloat16 through float32 copies (half_widen.h). OpenMP over output rows / elements with a
// static schedule; each output is computed by one thread in a fixed order, so results do
// not depend on the thread count.
#include "kernels/broadcast.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {
template <class T> inline T apply(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::add: return x + y;
    case BinaryOp::sub: return x - y;
    case BinaryOp::mul: return x * y;
    case BinaryOp::div: return x / y;
  }
  return x;
}

// Rows of the last dim: the outer index gives both inputs' row offsets, the inner loop
// steps through the last dim with each input's stride.
template <class T> void broadcast_binary_cpu(const BroadcastArgs& a) {
  T* out = static_cast<T*>(a.out);
  const T* x = static_cast<const T*>(a.a);
  const T* y = static_cast<const T*>(a.b);
  const int last = a.ndim - 1;
  const int64_t inner = a.ndim ? a.shape[last] : 1;
  const int64_t xs = a.ndim ? a.a_strides[last] : 0, ys = a.ndim ? a.b_strides[last] : 0;
  int64_t rows = 1;
  for (int d = 0; d < last; ++d) rows *= a.shape[d];
  const BinaryOp op = a.op;
#pragma omp parallel for schedule(static) if (rows * inner > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + strided_offset(r, last, a.shape, a.a_strides);
    const T* yr = y + strided_offset(r, last, a.shape, a.b_strides);
    T* o = out + r * inner;
    for (int64_t j = 0; j < inner; ++j) o[j] = apply(op, xr[j * xs], yr[j * ys]);
  }
}

template <class T> void sum_to_cpu(const SumToArgs& a) {
  const SumToPlan p = sum_to_plan(a);
  const T* in = static_cast<const T*>(a.in);
  T* out = static_cast<T*>(a.out);
#pragma omp parallel for schedule(static) if (a.out_n * p.r_n > 32768)
  for (int64_t o = 0; o < a.out_n; ++o) {
    const T* base = in + strided_offset(o, p.nk, p.kshape, p.kstride);
    double s = 0.0;
    for (int64_t r = 0; r < p.r_n; ++r) s += double(base[strided_offset(r, p.nr, p.rshape, p.rstride)]);
    out[o] = T(s);
  }
}

// ---- float16 / bfloat16 ---------------------------------------------------------------
template <DType H> void broadcast_binary_half(const BroadcastArgs& a) {
  int64_t n = 1;
  for (int d = 0; d < a.ndim; ++d) n *= a.shape[d];
  Widen<H> w;
  BroadcastArgs f = a;
  f.a = w.in(a.a, a.a_n);
  f.b = w.in(a.b, a.b_n);
  f.out = w.overwritten_out(a.out, n);
  run_f32(broadcast_binary_kernels(), f);
  w.narrow();
}
template <DType H> void sum_to_half(const SumToArgs& a) {
  int64_t n = 1;
  for (int d = 0; d < a.ndim; ++d) n *= a.shape[d];
  Widen<H> w;
  SumToArgs f = a;
  f.in = w.in(a.in, n);
  f.out = w.overwritten_out(a.out, a.out_n);
  run_f32(sum_to_kernels(), f);
  w.narrow();
}
template <DType H> void register_broadcast_half() {
  set_kernel<&broadcast_binary_half<H>>(broadcast_binary_kernels(), DeviceType::cpu, H);
  set_kernel<&sum_to_half<H>>(sum_to_kernels(), DeviceType::cpu, H);
}
}  // namespace

void register_broadcast_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(broadcast_binary_kernels(), broadcast_binary_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(sum_to_kernels(), sum_to_cpu);
  register_broadcast_half<DType::f16>();
  register_broadcast_half<DType::bf16>();
}

}  // namespace oomlab
