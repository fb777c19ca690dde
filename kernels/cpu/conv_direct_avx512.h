// conv_direct_avx512.h — AVX-512 twins of conv_direct_cpu.cpp's two inner loops (internal to
// the CPU backend). They compute every output element with the same FMAs in the same order
// as the AVX2 kernels, 16 lanes at a time instead of 8, so results are bitwise identical
// to the AVX2 path; only the speed differs. Used when the CPU has AVX-512F (checked at run
// time; the build stays x86-64-v3).
#pragma once
#include <xmmintrin.h>

#include <algorithm>
#include <cstdint>

namespace oomlab {

inline int64_t conv_direct_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Prefetches [p, p + n) into L2 in `parts` slices, one per next() (the next image's input,
// issued while the current one computes).
struct Prefetch {
  const float* p;
  int64_t n, step;
  Prefetch(const float* p_, int64_t n_, int64_t parts)
      : p(p_), n(n_), step(conv_direct_up(n_ / std::max<int64_t>(parts, 1) + 16, 16)) {}
  void next() {
    for (int64_t i = 0; i < std::min(n, step); i += 16) _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T1);
    p += step;
    n -= step;
  }
};

// Whether the direct conv kernels take the AVX-512 loops: the CPU has AVX-512F and no test
// turned it off (set_conv_direct_avx512(false) forces the AVX2 loops, to compare the bits).
bool conv_direct_avx512_enabled();
void set_conv_direct_avx512(bool on);

// run_taps's contract (conv_direct_cpu.cpp) with 16-position vectors: positions up to len
// rounded up to 16 are written (ldo must allow it) and read from `in` (the planes' slack
// must cover it). next_prefetch is called once per block of 48 positions.
void run_taps_avx512(const float* in, const int32_t* toff, int64_t ni, const float* wp, int64_t Kout, int64_t len,
                     float* out, int64_t ldo, Prefetch& pf);
// corr_kv's contract for 16 channels [kb, kb + 16) (or 32 when kv32): part[t*K8 + kb + lane]
// for every tap t < ntap.
void corr_avx512(const float* in, int64_t is, const float* dyt, int64_t ds, int64_t K8, int64_t cnt, int64_t Lo,
                 const int32_t* toff, int64_t ntap, float* part, int64_t kb, bool kv32, Prefetch& px, Prefetch& pd);

}  // namespace oomlab
