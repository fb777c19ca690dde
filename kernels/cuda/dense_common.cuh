// dense_common.cuh — device-side helpers shared by linear.cu, conv_bias.cu, batchnorm.cu
// and pool.cu, in namespace oomlab::cuda::dense (kept apart from the pointwise kernels'
// launch_utils.cuh):
//   * kBlock / grid_for(n): 256-thread blocks and a 1-D grid (<= 65535 blocks) for
//     grid-stride elementwise loops;
//   * Num<T>: element <-> compute-type conversions. The compute type is T for float and
//     double and float for float16/bfloat16 (stored as __half / __nv_bfloat16);
//   * per-channel kernels over x viewed as [N, C, HW] on a (splits, channels) grid
//     (ChannelSplit): block (s, c) of kChanThreads threads owns a chunk of channel c's
//     positions. ChanIter walks the channel's flat positions m = n*HW + i (thread t visits
//     t, t + blockDim, ...) without integer division per element; for_channel() visits
//     them four at a time so the loads of a thread are in flight together.
//     block_allsum<NV> adds NV doubles over the block with a fixed warp-shuffle tree and
//     hands every thread the totals; split sums leave one partial per block in a [C][S]
//     scratch array (the caller's workspace) that channel_totals adds in split order.
// Per-thread order, splits and reduction trees depend on the shapes only, so results are
// bitwise reproducible run to run.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch_utils.cuh"  // f32_to_f16 / f32_to_bf16: the project's rounding and NaN bits

namespace oomlab::cuda::dense {

constexpr int kBlock = 256;
inline unsigned grid_for(int64_t n) {
  const int64_t b = (n + kBlock - 1) / kBlock;
  return unsigned(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

constexpr int kChanThreads = 512;   // per-channel kernels
inline unsigned channel_grid(int64_t C) { return unsigned(C < 1 ? 1 : (C > 65535 ? 65535 : C)); }
// Splits of a channel's M positions for per-channel kernels launched on a (splits,
// channels) grid: about 2048 blocks in all, >= 8 elements per thread.
inline unsigned channel_splits(int64_t M, int64_t C) {
  const int64_t by_size = (M + kChanThreads * 8 - 1) / (kChanThreads * 8);
  const int64_t by_grid = 2048 / (C > 0 ? C : 1);
  int64_t s = by_size < by_grid ? by_size : by_grid;
  return unsigned(s < 1 ? 1 : (s > 65535 ? 65535 : s));
}

// The (S splits, channels) grid of split per-channel kernels: block (s, c) owns positions
// [s*chunk, min((s+1)*chunk, M)) of channel c (chunk_of). Split sums write one double
// partial per block into a [C][S] scratch array; channel_totals adds a channel's S
// partials in order s = 0, 1, ..., so every block (and run) gets the same value.
struct ChannelSplit {
  int64_t M, S, chunk;
  dim3 grid;
  ChannelSplit(int64_t m, int64_t C) : M(m), S(channel_splits(m, C)), chunk((m + S - 1) / S) {
    grid = dim3{unsigned(S), channel_grid(C)};
  }
};

__device__ __forceinline__ void chunk_of(int64_t M, int64_t chunk, int64_t& m0, int64_t& m1) {
  m0 = int64_t(blockIdx.x) * chunk;
  m1 = m0 + chunk < M ? m0 + chunk : M;
}

// part[(c*S + s)*NV + k] summed over s for each k by thread 0 and handed to every thread.
// Contains __syncthreads: call from all threads.
template <int NV>
__device__ __forceinline__ void channel_totals(const double* part, int64_t c, int64_t S, double (&v)[NV]) {
  __shared__ double t[NV];
  if (threadIdx.x == 0) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      double acc = 0.0;
      for (int64_t s = 0; s < S; ++s) acc += part[(c * S + s) * NV + k];
      t[k] = acc;
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < NV; ++k) v[k] = t[k];
  __syncthreads();
}

template <class T> struct Num;
template <> struct Num<float> {
  using C = float;
  static __device__ __forceinline__ float to(float v) { return v; }
  static __device__ __forceinline__ float from(float v) { return v; }
};
template <> struct Num<double> {
  using C = double;
  static __device__ __forceinline__ double to(double v) { return v; }
  static __device__ __forceinline__ double from(double v) { return v; }
};
template <> struct Num<__half> {
  using C = float;
  static __device__ __forceinline__ float to(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from(float v) { return f32_to_f16(v); }
};
template <> struct Num<__nv_bfloat16> {
  using C = float;
  static __device__ __forceinline__ float to(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from(float v) { return f32_to_bf16(v); }
};

// Sums v[0..NV) over the block (blockDim.x a multiple of 32, <= 1024, blockDim.y == 1);
// every thread receives the totals. Contains __syncthreads: call from all threads.
template <int NV> __device__ __forceinline__ void block_allsum(double (&v)[NV]) {
  __shared__ double warp_sums[NV][32];
  __shared__ double totals[NV];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int k = 0; k < NV; ++k)
    for (int off = 16; off > 0; off >>= 1) v[k] += __shfl_down_sync(0xffffffffu, v[k], off);
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < NV; ++k) warp_sums[k][warp] = v[k];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      double s = lane < nwarps ? warp_sums[k][lane] : 0.0;
      for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
      if (lane == 0) totals[k] = s;
    }
  }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < NV; ++k) v[k] = totals[k];
  __syncthreads();   // the shared arrays may be reused by the next call
}

// Walks channel c of [N, C, HW]: position m = n*HW + i has element offset (n*C + c)*HW + i.
struct ChanIter {
  int64_t off, i, HW, di, jump;   // jump: offset change per step without carry
  int64_t carry;                  // extra offset change when i wraps past HW
  __device__ __forceinline__ ChanIter(int64_t c, int64_t C, int64_t hw, int64_t start, int64_t step) : HW(hw) {
    const int64_t n = start / hw;
    i = start - n * hw;
    off = (n * C + c) * hw + i;
    const int64_t chw = C * hw, dn = step / hw;
    di = step - dn * hw;
    jump = dn * chw + di;
    carry = chw - hw;
  }
  __device__ __forceinline__ void next() {
    i += di;
    off += jump;
    if (i >= HW) { i -= HW; off += carry; }
  }
};

// Calls f(offset) for this thread's positions m0 + threadIdx.x + k*blockDim.x < m1 of
// channel c, in increasing m.
template <class F>
__device__ __forceinline__ void for_channel(int64_t c, int64_t C, int64_t HW, int64_t m0, int64_t m1, F&& f) {
  const int64_t step = blockDim.x;
  int64_t m = m0 + threadIdx.x;
  if (m >= m1) return;
  ChanIter it(c, C, HW, m, step);
  for (; m + 3 * step < m1; m += 4 * step) {
    const int64_t o0 = it.off; it.next();
    const int64_t o1 = it.off; it.next();
    const int64_t o2 = it.off; it.next();
    const int64_t o3 = it.off; it.next();
    f(o0); f(o1); f(o2); f(o3);
  }
  for (; m < m1; m += step) { f(it.off); it.next(); }
}

}  // namespace oomlab::cuda::dense
