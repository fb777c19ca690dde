// collective_cpu.cpp — CPU kernels of the collective family (kernels/collective.h): the
// element loops of a reduction step and of avg's division, on host buffers. 16-bit values
// go through float32 in blocks with dtype.h's vector converters. Single-threaded: the
// buffers are a ring chunk or a staging copy, and ranks run on threads of their own.
#include <algorithm>

#include "kernels/collective.h"

namespace oomlab {
namespace {
template <class T> void pair_plain(PairOp op, T* d, const T* a, const T* b, int64_t n) {
  if (op == PairOp::max) {
    for (int64_t i = 0; i < n; ++i) d[i] = (a[i] != a[i] || a[i] >= b[i]) ? a[i] : b[i];   // NaN wins
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = a[i] + b[i];
  }
}

template <class T> void reduce_pair_cpu(const ReducePairArgs& r) {
  pair_plain(r.op, static_cast<T*>(r.dst), static_cast<const T*>(r.a), static_cast<const T*>(r.b), r.n);
}

template <DType L> void reduce_pair_low_cpu(const ReducePairArgs& r) {
  constexpr int64_t kBlock = 1024;
  float x[kBlock], y[kBlock];
  auto* d = static_cast<uint16_t*>(r.dst);
  auto* a = static_cast<const uint16_t*>(r.a);
  auto* b = static_cast<const uint16_t*>(r.b);
  for (int64_t i = 0; i < r.n; i += kBlock) {
    const int64_t m = std::min(kBlock, r.n - i);
    low_to_float(L, a + i, x, m);
    low_to_float(L, b + i, y, m);
    pair_plain(r.op, x, x, y, m);
    float_to_low(L, x, d + i, m);
  }
}

template <class T> void divide_count_cpu(const DivideCountArgs& a) {
  T* p = static_cast<T*>(a.p);
  for (int64_t i = 0; i < a.n; ++i) p[i] /= T(a.count);
}

template <DType L> void divide_count_low_cpu(const DivideCountArgs& a) {
  uint16_t* q = static_cast<uint16_t*>(a.p);
  for (int64_t i = 0; i < a.n; ++i) {
    const float f = (L == DType::f16 ? half_to_float(q[i]) : bf16_to_float(q[i])) / float(a.count);
    q[i] = L == DType::f16 ? float_to_half(f) : float_to_bf16(f);
  }
}
}  // namespace

void register_collective_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(reduce_pair_kernels(), reduce_pair_cpu);
  set_kernel<&reduce_pair_cpu<int64_t>>(reduce_pair_kernels(), DeviceType::cpu, DType::i64);
  set_kernel<&reduce_pair_low_cpu<DType::f16>>(reduce_pair_kernels(), DeviceType::cpu, DType::f16);
  set_kernel<&reduce_pair_low_cpu<DType::bf16>>(reduce_pair_kernels(), DeviceType::cpu, DType::bf16);
  OOMLAB_REGISTER_FLOAT_CPU(divide_count_kernels(), divide_count_cpu);
  set_kernel<&divide_count_cpu<int64_t>>(divide_count_kernels(), DeviceType::cpu, DType::i64);
  set_kernel<&divide_count_low_cpu<DType::f16>>(divide_count_kernels(), DeviceType::cpu, DType::f16);
  set_kernel<&divide_count_low_cpu<DType::bf16>>(divide_count_kernels(), DeviceType::cpu, DType::bf16);
}

}  // namespace oomlab
