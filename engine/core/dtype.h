// dtype.h — element types of oomlab tensors and their conversions.
// Contract: DType values index kernel tables (kNumDTypes entries); float16/bfloat16
// are stored as uint16_t bit patterns and converted with round-to-nearest-even.
#pragma once
#include <cstdint>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>

namespace oomlab {

enum class DType : int { f32 = 0, f64, f16, bf16, i64, u8 };  // u8: masks, raw images
inline constexpr int kNumDTypes = 6;

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "float64", "float16", "bfloat16", "int64", "uint8"
DType parse_dtype(std::string_view s);  // accepts the names above and f32/fp32/f64/fp16/bf16/i64; throws ValueError
bool dtype_is_floating(DType t);

// IEEE half / bfloat16 <-> float conversions (round to nearest even; NaN preserved).
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
inline uint16_t float_to_bf16(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16; float f; std::memcpy(&f, &u, 4); return f;
}

// float <-> double casts that keep subnormals whatever the FPU's flush mode: the CPU
// backend runs its arithmetic with flush-to-zero / denormals-are-zero (register_cpu.cpp),
// under which a plain conversion would flush (1e-40 -> 0.0f). Casts on every device are
// IEEE round to nearest even with subnormals kept (docs/CUDA.md "Casts"; the CUDA side is
// kernels/cuda/cast_math.cuh). Values that are not float subnormals convert natively.
inline double f32_to_f64(float f) {
  uint32_t u; std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0 && (u & 0x7fffffu) != 0) {   // subnormal: DAZ would read 0
    const double m = double(u & 0x7fffffu) * 0x1p-149;     // exact
    return (u >> 31) ? -m : m;
  }
  return double(f);
}
inline float f64_to_f32(double d) {
  uint64_t b; std::memcpy(&b, &d, 8);
  const uint64_t mag = b & 0x7fffffffffffffffull;
  // |d| < 2^-126 and |d| >= 2^-1022 (a double subnormal rounds to 0 anyway): the float
  // result is subnormal (or FLT_MIN after rounding), which FTZ would flush.
  if (mag < 0x3810000000000000ull && mag >= 0x0010000000000000ull) {
    double a; std::memcpy(&a, &mag, 8);
    const uint32_t m = uint32_t(std::nearbyint(a * 0x1p149));   // exact scaling, nearest even
    const uint32_t u = m | uint32_t(b >> 32 & 0x80000000u);
    float f; std::memcpy(&f, &u, 4);
    return f;
  }
  return float(d);
}

// Bulk conversions of n contiguous values (t = f16 or bf16), bit-identical to the scalar
// functions above (F16C instructions where the CPU has them, NaNs fixed up to the scalar
// rule), OpenMP-parallel for large n. The CPU's 16-bit kernels and copies use them.
void low_to_float(DType t, const uint16_t* in, float* out, int64_t n);
void float_to_low(DType t, const float* in, uint16_t* out, int64_t n);

}  // namespace oomlab
