// dtype.cpp — dtype names, sizes and float16 conversions.
#include "engine/core/dtype.h"

#include <algorithm>

#if defined(__F16C__)
#include <immintrin.h>
#endif
#include "engine/core/error.h"

namespace oomlab {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i64: return 8;
    case DType::u8: return 1;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  if (s == "float32" || s == "f32" || s == "fp32" || s == "float") return DType::f32;
  if (s == "float64" || s == "f64" || s == "fp64" || s == "double") return DType::f64;
  if (s == "float16" || s == "f16" || s == "fp16" || s == "half") return DType::f16;
  if (s == "bfloat16" || s == "bf16") return DType::bf16;
  if (s == "int64" || s == "i64" || s == "long") return DType::i64;
  if (s == "uint8" || s == "u8") return DType::u8;
  throw ValueError("unknown dtype '" + std::string(s) +
                   "' (expected float32, float64, float16, bfloat16, int64 or uint8)");
}

bool dtype_is_floating(DType t) { return t != DType::i64 && t != DType::u8; }

uint16_t float_to_half(float f) {
  uint32_t x; std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return uint16_t(sign | 0x7e00u);       // NaN
  if (absx >= 0x47800000u) return uint16_t(sign | 0x7c00u);      // overflow -> inf
  if (absx < 0x38800000u) {                                      // subnormal or zero
    if (absx < 0x33000000u) return uint16_t(sign);               // rounds to zero
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int shift = 113 - int(absx >> 23) + 13;                      // 126 - exp + 13 ... keeps 10 bits
    uint32_t half_m = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_m & 1u))) half_m++;
    return uint16_t(sign | half_m);
  }
  uint32_t h = ((absx - 0x38000000u) >> 13);
  uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return uint16_t(sign | h);
}

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) out = sign;
    else {  // subnormal
      int e = -1;
      do { mant <<= 1; e++; } while ((mant & 0x400u) == 0);
      out = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | (exp + 112u) << 23 | (mant << 13);
  }
  float f; std::memcpy(&f, &out, 4); return f;
}

namespace {
constexpr int64_t kBulkParallelMin = 65536;

void half_block_to_float(const uint16_t* in, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
#endif
  for (; i < n; ++i) out[i] = half_to_float(in[i]);
}

void float_block_to_half(const float* in, uint16_t* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(in + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (!_mm256_testz_ps(nan, nan))   // NaN lanes: the scalar rule (sign | 0x7e00), not the payload
      for (int64_t j = i; j < i + 8; ++j) out[j] = float_to_half(in[j]);
  }
#endif
  for (; i < n; ++i) out[i] = float_to_half(in[i]);
}

// fn(lo, len) over fixed blocks of [0, n), OpenMP-parallel for large n.
template <class Fn> void in_blocks(int64_t n, Fn fn) {
  constexpr int64_t kBlock = 4096;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n > kBulkParallelMin)
  for (int64_t b = 0; b < blocks; ++b) fn(b * kBlock, std::min(kBlock, n - b * kBlock));
}
}  // namespace

void low_to_float(DType t, const uint16_t* in, float* out, int64_t n) {
  in_blocks(n, [&](int64_t lo, int64_t len) {
    if (t == DType::f16) half_block_to_float(in + lo, out + lo, len);
    else for (int64_t i = lo; i < lo + len; ++i) out[i] = bf16_to_float(in[i]);
  });
}

void float_to_low(DType t, const float* in, uint16_t* out, int64_t n) {
  in_blocks(n, [&](int64_t lo, int64_t len) {
    if (t == DType::f16) float_block_to_half(in + lo, out + lo, len);
    else for (int64_t i = lo; i < lo + len; ++i) out[i] = float_to_bf16(in[i]);
  });
}

}  // namespace oomlab
