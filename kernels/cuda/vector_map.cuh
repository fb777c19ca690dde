// vector_map.cuh — elementwise maps for the pointwise CUDA kernels (activation.cu,
// elementwise.cu): out[i] = op(a[i]) or op(a[i], b[i]) over n elements of storage type T,
// op taking and returning T (it loads / rounds itself with ld / st).
// Two loops, the same op per element, so their results are bit-identical:
//   * vectorized (issue 31), when every pointer is 16-byte aligned: each thread moves 16
//     bytes per load and store (Pack<T>: 4 floats, 2 doubles, 8 halves), as PyTorch's
//     vectorized_elementwise_kernel does; vector j covers elements [j*V, j*V + V), and the
//     n % V tail runs scalar after the vectors (on the H200 and the H100 it passed the
//     parity rows, and with the other issue-31 paths made ResNet-50 b128 steps 0.88-0.92x
//     of the scalar ones: kit runs of cbc8729 and aa21f01);
//   * scalar: the grid-stride loop, for a misaligned view.
// out may equal a or b (in-place ops such as relu_): each element is read before it is
// written, by the same thread, so no __restrict__ here.
#pragma once
#include <cstdint>

#include "kernels/cuda/launch_utils.cuh"

namespace oomlab::cuda {

template <class T> constexpr int kVecOf = int(16 / sizeof(T));
template <class T> struct alignas(16) Pack { T v[kVecOf<T>]; };

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <class T, class Op> __global__ void map1_kernel(T* out, const T* a, int64_t n, Op op) {
  for (int64_t i = gtid(); i < n; i += gstride()) out[i] = op(a[i]);
}
template <class T, class Op> __global__ void map2_kernel(T* out, const T* a, const T* b, int64_t n, Op op) {
  for (int64_t i = gtid(); i < n; i += gstride()) out[i] = op(a[i], b[i]);
}

template <class T, class Op> __global__ void map1_vec_kernel(T* out, const T* a, int64_t n, Op op) {
  constexpr int V = kVecOf<T>;
  const int64_t nv = n / V;
  const Pack<T>* pa = reinterpret_cast<const Pack<T>*>(a);
  Pack<T>* po = reinterpret_cast<Pack<T>*>(out);
  for (int64_t j = gtid(); j < nv; j += gstride()) {
    const Pack<T> x = pa[j];
    Pack<T> y;
#pragma unroll
    for (int k = 0; k < V; ++k) y.v[k] = op(x.v[k]);
    po[j] = y;
  }
  for (int64_t i = nv * V + gtid(); i < n; i += gstride()) out[i] = op(a[i]);
}
template <class T, class Op> __global__ void map2_vec_kernel(T* out, const T* a, const T* b, int64_t n, Op op) {
  constexpr int V = kVecOf<T>;
  const int64_t nv = n / V;
  const Pack<T>* pa = reinterpret_cast<const Pack<T>*>(a);
  const Pack<T>* pb = reinterpret_cast<const Pack<T>*>(b);
  Pack<T>* po = reinterpret_cast<Pack<T>*>(out);
  for (int64_t j = gtid(); j < nv; j += gstride()) {
    const Pack<T> x = pa[j], y = pb[j];
    Pack<T> z;
#pragma unroll
    for (int k = 0; k < V; ++k) z.v[k] = op(x.v[k], y.v[k]);
    po[j] = z;
  }
  for (int64_t i = nv * V + gtid(); i < n; i += gstride()) out[i] = op(a[i], b[i]);
}

// out[i] = op(a[i]) on the launch's stream; n == 0 launches nothing.
template <class T, class Op> void map1(const Launch& L, T* out, const T* a, int64_t n, Op op) {
  if (n == 0) return;
  if (aligned16(out) && aligned16(a))
    map1_vec_kernel<T, Op><<<grid_for(n / kVecOf<T> + 1), kThreads, 0, L.stream>>>(out, a, n, op);
  else
    map1_kernel<T, Op><<<grid_for(n), kThreads, 0, L.stream>>>(out, a, n, op);
  CUDA_LAUNCH_CHECK();
}
// out[i] = op(a[i], b[i]).
template <class T, class Op> void map2(const Launch& L, T* out, const T* a, const T* b, int64_t n, Op op) {
  if (n == 0) return;
  if (aligned16(out) && aligned16(a) && aligned16(b))
    map2_vec_kernel<T, Op><<<grid_for(n / kVecOf<T> + 1), kThreads, 0, L.stream>>>(out, a, b, n, op);
  else
    map2_kernel<T, Op><<<grid_for(n), kThreads, 0, L.stream>>>(out, a, b, n, op);
  CUDA_LAUNCH_CHECK();
}

}  // namespace oomlab::cuda
