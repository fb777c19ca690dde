// copy_index.cuh — the element offsets of copy.cu's strided kernels, host and device, so that
// kernels/cuda/check/copy_index_check.cu holds the fast form to the reference in CPU CI.
//   * Geom / offsets: the reference, int64 division and modulo per dimension (what the
//     strided kernels run by default);
//   * Geom32 / its offsets overload (behind OOMLAB_CUDA_COPY_FASTDIV, cuda_settings.h): the same
//     offsets in 32-bit arithmetic with each dimension's division done as a multiply-high
//     by a precomputed magic number (Granlund & Montgomery; the form of PyTorch's
//     IntDivider), for copies whose element count and every offset they touch fit in 31
//     bits with non-negative strides (fits32). An int64 division is a long emulated
//     sequence on a GPU; BERT's head-layout copies ([B, T, NH, D] <-> [B, NH, T, D], four
//     dimensions) make three per element.
// Both forms give the same offsets for every index below n (exact for n < 2^31).
#pragma once
#include <cstdint>

#ifdef __CUDACC__
#define OOMLAB_HD __host__ __device__ __forceinline__
#else
#define OOMLAB_HD inline
#endif

namespace oomlab::cuda {

struct Geom {
  int ndim;
  int64_t shape[8], in_st[8], out_st[8];
};

OOMLAB_HD void offsets(const Geom& g, int64_t idx, int64_t& io, int64_t& oo) {
  io = 0;
  oo = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t k = idx % g.shape[d];
    idx /= g.shape[d];
    io += k * g.in_st[d];
    oo += k * g.out_st[d];
  }
}

OOMLAB_HD uint32_t mul_hi32(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
  return __umulhi(a, b);
#else
  return uint32_t((uint64_t(a) * b) >> 32);
#endif
}

// n / d for n < 2^31 and 1 <= d < 2^31: (mulhi(n, magic) + n) >> shift.
struct FastDiv32 {
  uint32_t d = 1, magic = 0, shift = 0;
  static FastDiv32 make(uint32_t d) {
    FastDiv32 f;
    f.d = d;
    while (f.shift < 32 && (uint64_t(1) << f.shift) < d) ++f.shift;
    f.magic = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << f.shift) - d)) / d + 1);
    return f;
  }
  OOMLAB_HD uint32_t div(uint32_t n) const { return (mul_hi32(n, magic) + n) >> shift; }
};

struct Geom32 {
  int ndim;
  FastDiv32 shape[8];
  uint32_t in_st[8], out_st[8];
};

// Whether g's copy of n elements can run in 32 bits: n, every stride and the largest offset
// on either side below 2^31, no negative stride.
inline bool fits32(const Geom& g, int64_t n) {
  constexpr int64_t kMax = (int64_t(1) << 31) - 1;
  if (n > kMax) return false;
  int64_t in_hi = 0, out_hi = 0;
  for (int d = 0; d < g.ndim; ++d) {
    if (g.shape[d] < 1 || g.shape[d] > kMax || g.in_st[d] < 0 || g.out_st[d] < 0) return false;
    in_hi += (g.shape[d] - 1) * g.in_st[d];
    out_hi += (g.shape[d] - 1) * g.out_st[d];
    if (in_hi > kMax || out_hi > kMax) return false;
  }
  return true;
}

inline Geom32 to_geom32(const Geom& g) {
  Geom32 h{};
  h.ndim = g.ndim;
  for (int d = 0; d < g.ndim; ++d) {
    h.shape[d] = FastDiv32::make(uint32_t(g.shape[d]));
    h.in_st[d] = uint32_t(g.in_st[d]);
    h.out_st[d] = uint32_t(g.out_st[d]);
  }
  return h;
}

OOMLAB_HD void offsets(const Geom32& g, uint32_t idx, uint32_t& io, uint32_t& oo) {
  io = 0;
  oo = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const uint32_t q = g.shape[d].div(idx), k = idx - q * g.shape[d].d;
    idx = q;
    io += k * g.in_st[d];
    oo += k * g.out_st[d];
  }
}

}  // namespace oomlab::cuda

#undef OOMLAB_HD
