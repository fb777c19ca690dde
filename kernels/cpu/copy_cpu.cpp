// copy_cpu.cpp — the copy family's CPU kernel (kernels/copy.h): strided copy with dtype
// conversion on the host (any dtype -> any dtype).
// Contiguous same-dtype copies are a memcpy; otherwise an index walk over the shape.
// Casts keep subnormals although the backend's arithmetic flushes them (dtype.h's
// f32_to_f64 / f64_to_f32): the cast semantics of every device (kernels/cuda/cast_math.cuh).
#include <cstring>

#include "kernels/copy.h"

namespace oomlab {
namespace {
inline double load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return f32_to_f64(static_cast<const float*>(p)[i]);
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::f16: return f32_to_f64(half_to_float(static_cast<const uint16_t*>(p)[i]));
    case DType::bf16: return f32_to_f64(bf16_to_float(static_cast<const uint16_t*>(p)[i]));
    case DType::i64: return double(static_cast<const int64_t*>(p)[i]);
    case DType::u8: return double(static_cast<const uint8_t*>(p)[i]);
  }
  return 0;
}
inline void store(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = f64_to_f32(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = float_to_half(f64_to_f32(v)); break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(f64_to_f32(v)); break;
    case DType::i64: static_cast<int64_t*>(p)[i] = int64_t(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(v); break;
  }
}

// Sets the quiet bit of every NaN (F16C's conversion quiets signaling NaNs, the scalar
// one and bfloat16's shift do not; casts quiet them on every path and device).
void quiet_nans(float* p, int64_t n) {
  uint32_t* u = reinterpret_cast<uint32_t*>(p);
  for (int64_t i = 0; i < n; ++i)
    if ((u[i] & 0x7fffffffu) > 0x7f800000u) u[i] |= 0x00400000u;
}

// out[ooff + i * out_st] = in[ioff + i * in_st] for i < n, elements of U's size, bit for bit.
template <class U>
void strided_bits(const void* in, int64_t ioff, int64_t in_st, void* out, int64_t ooff, int64_t out_st, int64_t n) {
  const U* s = static_cast<const U*>(in) + ioff;
  U* d = static_cast<U*>(out) + ooff;
  for (int64_t i = 0; i < n; ++i) d[i * out_st] = s[i * in_st];
}

void copy_cpu(const CopyArgs& a) {
  const auto [n, in_contig, out_contig] = copy_layout(a);
  if (n == 0) return;
  if (in_contig && out_contig) {
    if (a.in_dtype == a.out_dtype) { std::memcpy(a.out, a.in, size_t(n) * dtype_size(a.in_dtype)); return; }
    if (a.in_dtype == DType::f32 && a.out_dtype == DType::f64) {
      const float* s = static_cast<const float*>(a.in); double* o = static_cast<double*>(a.out);
      for (int64_t i = 0; i < n; ++i) o[i] = f32_to_f64(s[i]);
      return;
    }
    const bool in_low = a.in_dtype == DType::f16 || a.in_dtype == DType::bf16;
    const bool out_low = a.out_dtype == DType::f16 || a.out_dtype == DType::bf16;
    if (a.in_dtype == DType::f32 && out_low) {   // autocast's casts: bulk, bit-identical to store()
      float_to_low(a.out_dtype, static_cast<const float*>(a.in), static_cast<uint16_t*>(a.out), n);
      return;
    }
    if (in_low && a.out_dtype == DType::f32) {   // NaNs quieted, as every other cast (cast_math.cuh)
      float* o = static_cast<float*>(a.out);
      low_to_float(a.in_dtype, static_cast<const uint16_t*>(a.in), o, n);
      quiet_nans(o, n);
      return;
    }
    if (a.in_dtype == DType::f64 && a.out_dtype == DType::f32) {
      const double* s = static_cast<const double*>(a.in); float* o = static_cast<float*>(a.out);
      for (int64_t i = 0; i < n; ++i) o[i] = f64_to_f32(s[i]);
      return;
    }
  }
  const size_t isz = dtype_size(a.in_dtype);
  const bool same = a.in_dtype == a.out_dtype;
  int64_t inner = a.shape[a.ndim - 1], in_st = a.in_strides[a.ndim - 1], out_st = a.out_strides[a.ndim - 1];
  int64_t outer = n / inner;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, ioff = 0, ooff = 0;
    for (int d = a.ndim - 2; d >= 0; --d) {
      int64_t idx = rem % a.shape[d];
      rem /= a.shape[d];
      ioff += idx * a.in_strides[d];
      ooff += idx * a.out_strides[d];
    }
    if (same && isz == 4) {
      strided_bits<uint32_t>(a.in, ioff, in_st, a.out, ooff, out_st, inner);
    } else if (same && isz == 8) {
      strided_bits<uint64_t>(a.in, ioff, in_st, a.out, ooff, out_st, inner);
    } else if (same && isz == 1) {
      strided_bits<uint8_t>(a.in, ioff, in_st, a.out, ooff, out_st, inner);
    } else if (same && isz == 2) {   // float16 / bfloat16: the bits; NaNs through the cast, as on CUDA
      const uint16_t* s = static_cast<const uint16_t*>(a.in) + ioff; uint16_t* d = static_cast<uint16_t*>(a.out) + ooff;
      const uint16_t inf = a.in_dtype == DType::f16 ? 0x7c00 : 0x7f80;
      for (int64_t i = 0; i < inner; ++i) {
        const uint16_t v = s[i * in_st];
        if ((v & 0x7fff) > inf) store(a.out, a.out_dtype, ooff + i * out_st, load(a.in, a.in_dtype, ioff + i * in_st));
        else d[i * out_st] = v;
      }
    } else {
      for (int64_t i = 0; i < inner; ++i)
        store(a.out, a.out_dtype, ooff + i * out_st, load(a.in, a.in_dtype, ioff + i * in_st));
    }
  }
}
}  // namespace

void register_copy_cpu_kernels() {
  for (int t = 0; t < kNumDTypes; ++t) set_kernel<&copy_cpu>(copy_kernels(), DeviceType::cpu, DType(t));
}

}  // namespace oomlab
