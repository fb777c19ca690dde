// cast_math.cuh — the value conversions of the CUDA copy kernel's dtype casts (copy.cu),
// as __host__ __device__ functions: kernels/cuda/check/formula_check.cu runs this very code
// on the host, with the FPU in IEEE mode (no flush-to-zero), against the CPU copy kernel.
// Cast semantics, the same on every device (docs/CUDA.md "Casts"): float <-> double and the
// 16-bit formats convert as IEEE 754 round to nearest even and keep subnormals (a cast is
// never flushed, although the CPU backend's arithmetic runs with FTZ/DAZ); every value goes
// through double (f64 -> f16 / bf16 rounds twice: through float, as the CPU does); NaNs
// keep the x86 conversions' bits (cvtss2sd / cvtsd2ss: sign and top payload bits, quieted;
// dtype.h's half / bfloat16 rules); float -> int64 / uint8 truncate with x86's out-of-range
// results (INT64_MIN; uint8 through a 32-bit conversion, so 300.7 -> 44, -1.5 -> 255).
// 16-bit values travel as their bits (uint16_t), so no __half type is needed on the host.
#pragma once
#include <cstdint>
#include <cstring>

#include "engine/core/dtype.h"

namespace oomlab::cuda::cast {

__host__ __device__ __forceinline__ uint32_t bits32(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
__host__ __device__ __forceinline__ float from_bits32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
__host__ __device__ __forceinline__ uint64_t bits64(double d) {
#ifdef __CUDA_ARCH__
  return uint64_t(__double_as_longlong(d));
#else
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
#endif
}
__host__ __device__ __forceinline__ double from_bits64(uint64_t u) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double((long long)u);
#else
  double d;
  std::memcpy(&d, &u, 8);
  return d;
#endif
}

// float <-> double as x86's cvtss2sd / cvtsd2ss in IEEE mode: NaNs keep their sign and
// top payload bits and become quiet (the GPU's cvt would write a canonical NaN).
__host__ __device__ __forceinline__ double f32_to_f64(float f) {
  if (f == f) return double(f);
  const uint32_t u = bits32(f);
  return from_bits64((uint64_t(u & 0x80000000u) << 32) | 0x7ff8000000000000ull | (uint64_t(u & 0x7fffffu) << 29));
}
__host__ __device__ __forceinline__ float f64_to_f32(double v) {
  if (v == v) return float(v);
  const uint64_t b = bits64(v);
  return from_bits32((uint32_t(b >> 32) & 0x80000000u) | 0x7fc00000u | uint32_t((b >> 29) & 0x7fffffu));
}

// half bits -> float as half_to_float (dtype.cpp): exact; a NaN keeps its payload.
__host__ __device__ __forceinline__ float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu, out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {   // a half subnormal is a normal float
      int e = -1;
      do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
      out = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | (exp + 112u) << 23 | (mant << 13);
  }
  return from_bits32(out);
}
// bfloat16 bits -> float: the bits shifted up (subnormals and NaN payloads kept).
__host__ __device__ __forceinline__ float bf16_to_f32(uint16_t b) { return from_bits32(uint32_t(b) << 16); }

// float -> half bits as float_to_half (dtype.cpp): nearest even, subnormals kept,
// overflow to inf, NaN -> sign | 0x7e00.
__host__ __device__ __forceinline__ uint16_t f32_to_f16(float f) {
  const uint32_t x = bits32(f), sign = (x >> 16) & 0x8000u, absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return uint16_t(sign | 0x7e00u);
  if (absx >= 0x47800000u) return uint16_t(sign | 0x7c00u);
  if (absx < 0x38800000u) {
    if (absx < 0x33000000u) return uint16_t(sign);
    const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const int shift = 113 - int(absx >> 23) + 13;
    uint32_t half_m = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_m & 1u))) ++half_m;
    return uint16_t(sign | half_m);
  }
  uint32_t h = (absx - 0x38000000u) >> 13;
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}
// float -> bfloat16 bits as float_to_bf16 (dtype.h): nearest even on the bits; NaN quieted.
__host__ __device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = bits32(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// x86 cvttsd2si: truncation, INT_MIN for NaN and out-of-range values.
__host__ __device__ __forceinline__ long long x86_to_i64(double v) {
  return (v >= -9223372036854775808.0 && v < 9223372036854775808.0) ? (long long)v : (long long)(1ull << 63);
}
__host__ __device__ __forceinline__ int x86_to_i32(double v) {
  return (v > -2147483649.0 && v < 2147483648.0) ? int(v) : int(0x80000000u);
}

// A same-dtype copy moves bits, except that a strided 16-bit copy quiets a NaN as the CPU's
// round trip through float does (f16: sign | 0x7e00; bf16: the quiet bit set).
__host__ __device__ __forceinline__ uint16_t quiet_f16_nan(uint16_t v) {
  return ((v & 0x7c00u) == 0x7c00u && (v & 0x3ffu)) ? uint16_t((v & 0x8000u) | 0x7e00u) : v;
}
__host__ __device__ __forceinline__ uint16_t quiet_bf16_nan(uint16_t v) {
  return ((v & 0x7f80u) == 0x7f80u && (v & 0x7fu)) ? uint16_t(v | 0x40u) : v;
}

__host__ __device__ __forceinline__ double load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return f32_to_f64(static_cast<const float*>(p)[i]);
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::f16: return f32_to_f64(f16_to_f32(static_cast<const uint16_t*>(p)[i]));
    case DType::bf16: return f32_to_f64(bf16_to_f32(static_cast<const uint16_t*>(p)[i]));
    case DType::i64: return double(static_cast<const long long*>(p)[i]);
    case DType::u8: return double(static_cast<const uint8_t*>(p)[i]);
  }
  return 0.0;
}
__host__ __device__ __forceinline__ void store(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = f64_to_f32(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::f16: static_cast<uint16_t*>(p)[i] = f32_to_f16(f64_to_f32(v)); break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = f32_to_bf16(f64_to_f32(v)); break;
    case DType::i64: static_cast<long long*>(p)[i] = x86_to_i64(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(unsigned(x86_to_i32(v)) & 0xffu); break;
  }
}

}  // namespace oomlab::cuda::cast
