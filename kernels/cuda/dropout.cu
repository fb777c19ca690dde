// dropout.cu — CUDA kernels of the dropout family (kernels/dropout.h) in float32, float64,
// float16 and bfloat16 (half types compute in float, one rounding at the store).
// Bit-identical to kernels/cpu/dropout_cpu.cpp: the keep-mask is the same Philox stream
// (element i keeps iff (block(seed, base + i/4)[i%4] >> 8) >= ceil(p 2^24)) and y / dx are
// the same products. The backward overwrites dx. Under graph capture the forward adds the
// replay's offset delta to its base (graph_consts.h), so replays draw fresh masks.
// Under cuda_dropout_vec() (OOMLAB_CUDA_DROPOUT_VEC=1, default off: not yet run on a GPU) both
// directions move a Philox block's four elements as one vector (dropout_math.cuh; the scalar
// forward issues four strided 4-byte loads, stores and four 1-byte mask stores per thread):
// the same arithmetic, the same bits (formula_check runs the bodies against the CPU).
#include <cmath>

#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/dropout_math.cuh"
#include "kernels/cuda/graph_consts.h"
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/dropout.h"

namespace oomlab {
namespace {
using namespace cuda;

// ---- dropout ----------------------------------------------------------------------------
// One thread per Philox block (4 elements).
// delta (graph_consts.h): a captured launch's replay offset, added to base; null eagerly.
template <class T> __global__ void dropout_fwd_kernel(const T* x, T* y, uint8_t* mask, int64_t n, uint32_t thr,
                                                      compute_t<T> scale, uint64_t seed, uint64_t base,
                                                      const uint64_t* delta) {
  using C = compute_t<T>;
  if (delta) base += *delta;
  const int64_t nblocks = (n + 3) / 4;
  for (int64_t b = gtid(); b < nblocks; b += gstride()) {
    const U4 w = philox_block(seed, base + uint64_t(b));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * b + k;
      if (i >= n) break;
      const uint8_t keep = uint8_t((w.w[k] >> 8) >= thr);
      y[i] = st<T>(mul_rn(ld(x[i]), mul_rn(C(keep), scale)));
      if (mask) mask[i] = keep;
    }
  }
}
template <class T>
__global__ void dropout_bwd_kernel(const T* dy, const uint8_t* mask, T* dx, int64_t n, compute_t<T> scale) {
  using C = compute_t<T>;
  for (int64_t i = gtid(); i < n; i += gstride()) dx[i] = st<T>(mul_rn(ld(dy[i]), mul_rn(C(mask[i]), scale)));
}
// Under cuda_dropout_vec(): a thread per Philox block with vector loads and stores
// (dropout_math.cuh; vec: the pointers are aligned to the vector).
template <class T> __global__ void dropout_fwd_vec_kernel(const T* __restrict__ x, T* __restrict__ y,
                                                          uint8_t* __restrict__ mask, int64_t n, uint32_t thr,
                                                          compute_t<T> scale, uint64_t seed, uint64_t base,
                                                          const uint64_t* delta, bool vec) {
  if (delta) base += *delta;
  for (int64_t q = gtid(); q < (n + 3) / 4; q += gstride())
    dropout_fwd_quad<DeviceIO<T>>(x, y, mask, n, thr, scale, seed, base, q, vec);
}
template <class T> __global__ void dropout_bwd_vec_kernel(const T* __restrict__ dy, const uint8_t* __restrict__ mask,
                                                          T* __restrict__ dx, int64_t n, compute_t<T> scale,
                                                          bool vec) {
  for (int64_t q = gtid(); q < (n + 3) / 4; q += gstride())
    dropout_bwd_quad<DeviceIO<T>>(dy, mask, dx, n, scale, q, vec);
}

template <class T> void dropout_forward_cuda(const DropoutArgs& a) {
  if (a.n == 0) return;
  const Launch L("dropout");
  const uint32_t thr = uint32_t(std::ceil(a.p * 16777216.0));  // as the CPU kernel
  const compute_t<T> scale = compute_t<T>(1.0 / (1.0 - a.p));
  if (cuda_dropout_vec()) {
    dropout_fwd_vec_kernel<T><<<grid_for((a.n + 3) / 4), kThreads, 0, L.stream>>>(
        static_cast<const T*>(a.x), static_cast<T*>(a.y), a.mask, a.n, thr, scale, a.seed, a.base, graph_rng_delta(),
        dropout_vec_aligned(a.x, a.y, a.mask, sizeof(T)));
  } else {
    dropout_fwd_kernel<T><<<grid_for((a.n + 3) / 4), kThreads, 0, L.stream>>>(
        static_cast<const T*>(a.x), static_cast<T*>(a.y), a.mask, a.n, thr, scale, a.seed, a.base, graph_rng_delta());
  }
  CUDA_LAUNCH_CHECK();
}
template <class T> void dropout_backward_cuda(const DropoutArgs& a) {
  if (a.n == 0) return;
  const Launch L("dropout_backward");
  const compute_t<T> scale = compute_t<T>(1.0 / (1.0 - a.p));
  if (cuda_dropout_vec()) {
    dropout_bwd_vec_kernel<T><<<grid_for((a.n + 3) / 4), kThreads, 0, L.stream>>>(
        static_cast<const T*>(a.dy), a.mask, static_cast<T*>(a.dx), a.n, scale,
        dropout_vec_aligned(a.dy, a.dx, a.mask, sizeof(T)));
  } else {
    dropout_bwd_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<const T*>(a.dy), a.mask,
                                                                     static_cast<T*>(a.dx), a.n, scale);
  }
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_dropout_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(dropout_forward_kernels(), dropout_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(dropout_backward_kernels(), dropout_backward_cuda);
}

}  // namespace oomlab
