// row_lanes.cuh — row reductions in the exact order of the CPU kernels' 8-lane sums
// (lane_sum in kernels/cpu/fast_math.h, row_max in kernels/cpu/softmax_cpu.cpp), so row
// statistics on the GPU are bit-identical to the CPU's.
// Layout: a row group is 8 consecutive threads of a warp; thread k = threadIdx.x & 7 owns
// the columns j = k, k+8, ... of the main part j < C8 = C & ~7 and accumulates them in
// order (CPU lane k); thread 0 then adds the tail j = C8..C-1 in order (CPU adds the tail
// to lane 0); the eight partials are combined as ((0 + s0) + s1) + ... + s7.
// Contract: every thread of the warp calls these with the same C (they shuffle with a
// full mask); a group past the last row works on a clamped valid row and does not write.
#pragma once
#include "kernels/cuda/launch_utils.cuh"

namespace oomlab::cuda {

constexpr int kLanes = 8;
constexpr int kRowsPerBlock = kThreads / kLanes;  // 32 row groups per 256-thread block

__device__ __forceinline__ int lane8() { return int(threadIdx.x & 7); }
__device__ __forceinline__ int64_t main_end(int64_t C) { return C & ~int64_t(kLanes - 1); }

// CPU lane_sum: acc(s, j, fused) returns s plus column j's term. When the term is a
// product, GCC fuses it into the add (fused = true) in the main part, but its vectorised
// tail loop rounds the products first and fuses only the last term of an odd-length tail
// (read from the generated code; checked bitwise on float64 rows of every tail length).
// Terms that are exact (float * float in double) or plain adds may ignore the flag.
// U > 0 unrolls the main loop U times (#pragma unroll U), so that a thread has up to U loads
// in flight ahead of its chain of adds (with __restrict__ data); U = 0 leaves it to the
// compiler (4 in nvcc 13's code). The adds and their order are the same either way.
template <int U = 0, class Acc> __device__ __forceinline__ double lane_sum8(int64_t C, Acc acc) {
  const int k = lane8();
  const int64_t C8 = main_end(C);
  double s = 0.0;
  if constexpr (U == 0) {
    for (int64_t j = k; j < C8; j += kLanes) s = acc(s, j, true);
  } else {
#pragma unroll U
    for (int64_t j = k; j < C8; j += kLanes) s = acc(s, j, true);
  }
  if (k == 0)
    for (int64_t j = C8; j < C; ++j) s = acc(s, j, j == C - 1 && ((C - C8) & 1));
  double r = 0.0;
#pragma unroll
  for (int t = 0; t < kLanes; ++t) r = add_rn(r, __shfl_sync(0xffffffffu, s, t, kLanes));
  return r;
}

// CPU row_max: every lane starts from init (the loss kernels pass x[0], so a NaN there
// wins as on the CPU; masked_softmax passes -inf), takes v > m ? v : m over its columns,
// lanes combined in order. get(j) loads column j.
template <class V, class Get> __device__ __forceinline__ V lane_max8(int64_t C, V init, Get get) {
  const int k = lane8();
  const int64_t C8 = main_end(C);
  V m = init;
  for (int64_t j = k; j < C8; j += kLanes) {
    const V v = get(j);
    m = v > m ? v : m;
  }
  if (k == 0)
    for (int64_t j = C8; j < C; ++j) {
      const V v = get(j);
      m = v > m ? v : m;
    }
  V r = __shfl_sync(0xffffffffu, m, 0, kLanes);
#pragma unroll
  for (int t = 1; t < kLanes; ++t) {
    const V v = __shfl_sync(0xffffffffu, m, t, kLanes);
    r = v > r ? v : r;
  }
  return r;
}

// Grid-stride loop over row groups, uniform per block (all warps take the same trip count).
// body(row, valid): row is clamped to [0, rows) when valid is false.
template <class Body> __device__ __forceinline__ void for_each_row_group(int64_t rows, Body body) {
  for (int64_t base = int64_t(blockIdx.x) * kRowsPerBlock; base < rows; base += int64_t(gridDim.x) * kRowsPerBlock) {
    const int64_t row = base + (threadIdx.x >> 3);
    const bool valid = row < rows;
    body(valid ? row : rows - 1, valid);
  }
}
inline int row_grid(int64_t rows) { return grid_for(rows, kRowsPerBlock); }

}  // namespace oomlab::cuda
