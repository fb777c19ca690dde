// philox_cpu.h — the CPU kernels' Philox4x32-10 (dropout, fused attention's dropout replay):
// philox_words fills words[4 * b + k] = Generator::block(seed, first + b)[k]
// (engine/core/rng.h) for b < nb <= kPhiloxBatch: the random words in element order. With
// AVX2 (the x86-64-v3 build) eight blocks run per vector (32x32 -> 64-bit products on even
// and odd lanes, then a 4x8 transpose into element order); otherwise a structure-of-arrays
// loop the compiler vectorises. Both give the reference's bits (tests/test_ops_dropout.cpp).
#pragma once
#include <cstdint>
#include <cstring>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace oomlab {

constexpr int64_t kPhiloxBatch = 64;   // blocks per batch = 256 elements

namespace philox_detail {
constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;

inline void counters(uint64_t first, int64_t nb, uint32_t* lo, uint32_t* hi) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint64_t c = first + uint64_t(b);
    lo[b] = uint32_t(c); hi[b] = uint32_t(c >> 32);
  }
}

#if defined(__AVX2__)
// lo/hi halves of the eight 32x32-bit products a[i] * m.
inline void mulhilo8(__m256i a, __m256i m, __m256i& lo, __m256i& hi) {
  const __m256i even = _mm256_mul_epu32(a, m), odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// Blocks b..b+7 in element order: 32 words from the four counter vectors.
inline void store_element_order(__m256i c0, __m256i c1, __m256i c2, __m256i c3, uint32_t* out) {
  const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
  const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
  const __m256i b04 = _mm256_unpacklo_epi64(t0, t2), b15 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i b26 = _mm256_unpacklo_epi64(t1, t3), b37 = _mm256_unpackhi_epi64(t1, t3);
  __m256i* o = reinterpret_cast<__m256i*>(out);
  _mm256_storeu_si256(o + 0, _mm256_permute2x128_si256(b04, b15, 0x20));
  _mm256_storeu_si256(o + 1, _mm256_permute2x128_si256(b26, b37, 0x20));
  _mm256_storeu_si256(o + 2, _mm256_permute2x128_si256(b04, b15, 0x31));
  _mm256_storeu_si256(o + 3, _mm256_permute2x128_si256(b26, b37, 0x31));
}

inline void philox_words_avx2(uint64_t seed, uint64_t first, int64_t nb, uint32_t* words) {
  alignas(32) uint32_t lo[kPhiloxBatch], hi[kPhiloxBatch];
  counters(first, (nb + 7) / 8 * 8, lo, hi);   // whole vectors; the extra blocks are dropped below
  const __m256i m0 = _mm256_set1_epi32(int(M0)), m1 = _mm256_set1_epi32(int(M1));
  for (int64_t b = 0; b < nb; b += 8) {
    __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo + b));
    __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hi + b));
    __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      __m256i lo0, hi0, lo1, hi1;
      mulhilo8(c0, m0, lo0, hi0);
      mulhilo8(c2, m1, lo1, hi1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), _mm256_set1_epi32(int(k0)));
      c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), _mm256_set1_epi32(int(k1)));
      c1 = lo1; c3 = lo0;
      k0 += W0; k1 += W1;
    }
    if (nb - b >= 8) {
      store_element_order(c0, c1, c2, c3, words + 4 * b);
    } else {   // the last vector is partial
      alignas(32) uint32_t tmp[32];
      store_element_order(c0, c1, c2, c3, tmp);
      std::memcpy(words + 4 * b, tmp, size_t(4 * (nb - b)) * sizeof(uint32_t));
    }
  }
}
#endif

// The structure-of-arrays loop (any target; tests compare it with the AVX2 one).
inline void philox_words_portable(uint64_t seed, uint64_t first, int64_t nb, uint32_t* words) {
  uint32_t c0[kPhiloxBatch], c1[kPhiloxBatch], c2[kPhiloxBatch] = {}, c3[kPhiloxBatch] = {};
  counters(first, nb, c0, c1);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
#pragma omp simd
    for (int64_t b = 0; b < nb; ++b) {
      const uint64_t p0 = uint64_t(M0) * c0[b], p1 = uint64_t(M1) * c2[b];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[b] ^ k0, n2 = uint32_t(p0 >> 32) ^ c3[b] ^ k1;
      c1[b] = uint32_t(p1); c3[b] = uint32_t(p0); c0[b] = n0; c2[b] = n2;
    }
    k0 += W0; k1 += W1;
  }
  for (int64_t b = 0; b < nb; ++b) {
    words[4 * b] = c0[b]; words[4 * b + 1] = c1[b]; words[4 * b + 2] = c2[b]; words[4 * b + 3] = c3[b];
  }
}
}  // namespace philox_detail

inline void philox_words(uint64_t seed, uint64_t first, int64_t nb, uint32_t* words) {
#if defined(__AVX2__)
  philox_detail::philox_words_avx2(seed, first, nb, words);
#else
  philox_detail::philox_words_portable(seed, first, nb, words);
#endif
}

}  // namespace oomlab
