// dropout_math.cuh — the per-thread bodies of dropout.cu's vectorized kernels (behind
// OOMLAB_CUDA_DROPOUT_VEC, cuda_settings.h), host and device, so that
// kernels/cuda/check/formula_check.cu runs them against the CPU kernels bit for bit.
// A thread takes one Philox block, elements [4q, 4q + 4): the forward loads its four x as one
// 4 * sizeof(T)-byte vector (16 bytes for float32), stores y so and the four keep bytes as
// one 4-byte word; the backward loads dy and the mask so. The arithmetic per element is the
// scalar kernels' (y = x * (keep * scale), dx = dy * (mask * scale), rounded once), so the
// results are the same bits. A partial last block, or pointers not aligned to the vector
// (vec = false: a view into a larger buffer), take the scalar form.
#pragma once
#include <cstdint>

#include "kernels/cuda/launch_utils.cuh"

namespace oomlab::cuda {

template <class T> struct alignas(4 * sizeof(T)) Quad { T v[4]; };
struct alignas(4) MaskQuad { uint8_t v[4]; };

inline bool dropout_vec_aligned(const void* a, const void* b, const uint8_t* mask, size_t elem) {
  const auto off = [](const void* p, size_t k) { return reinterpret_cast<uintptr_t>(p) % k; };
  return off(a, 4 * elem) == 0 && off(b, 4 * elem) == 0 && (mask == nullptr || off(mask, 4) == 0);
}

// Forward of Philox block q: y and the keep-mask (may be null) of elements 4q .. 4q+3 below n.
template <class IO, class T>
__host__ __device__ inline void dropout_fwd_quad(const T* x, T* y, uint8_t* mask, int64_t n, uint32_t thr,
                                                 typename IO::C scale, uint64_t seed, uint64_t base, int64_t q,
                                                 bool vec) {
  using C = typename IO::C;
  const U4 w = philox_block(seed, base + uint64_t(q));
  if (vec && 4 * q + 4 <= n) {
    const Quad<T> xv = reinterpret_cast<const Quad<T>*>(x)[q];
    Quad<T> yv;
    MaskQuad mv;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      mv.v[k] = uint8_t((w.w[k] >> 8) >= thr);
      yv.v[k] = IO::st(mul_rn(IO::ld(xv.v[k]), mul_rn(C(mv.v[k]), scale)));
    }
    reinterpret_cast<Quad<T>*>(y)[q] = yv;
    if (mask) reinterpret_cast<MaskQuad*>(mask)[q] = mv;
    return;
  }
  for (int k = 0; k < 4 && 4 * q + k < n; ++k) {
    const int64_t i = 4 * q + k;
    const uint8_t keep = uint8_t((w.w[k] >> 8) >= thr);
    y[i] = IO::st(mul_rn(IO::ld(x[i]), mul_rn(C(keep), scale)));
    if (mask) mask[i] = keep;
  }
}

// Backward of elements 4q .. 4q+3 below n: dx = dy * (mask * scale).
template <class IO, class T>
__host__ __device__ inline void dropout_bwd_quad(const T* dy, const uint8_t* mask, T* dx, int64_t n,
                                                 typename IO::C scale, int64_t q, bool vec) {
  using C = typename IO::C;
  if (vec && 4 * q + 4 <= n) {
    const Quad<T> gv = reinterpret_cast<const Quad<T>*>(dy)[q];
    const MaskQuad mv = reinterpret_cast<const MaskQuad*>(mask)[q];
    Quad<T> out;
#pragma unroll
    for (int k = 0; k < 4; ++k) out.v[k] = IO::st(mul_rn(IO::ld(gv.v[k]), mul_rn(C(mv.v[k]), scale)));
    reinterpret_cast<Quad<T>*>(dx)[q] = out;
    return;
  }
  for (int64_t i = 4 * q; i < 4 * q + 4 && i < n; ++i) dx[i] = IO::st(mul_rn(IO::ld(dy[i]), mul_rn(C(mask[i]), scale)));
}

}  // namespace oomlab::cuda
