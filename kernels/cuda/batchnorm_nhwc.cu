// batchnorm_nhwc.cu — CUDA batch_norm forward/backward for channels_last inputs
// (BatchNormArgs::channels_last: x is [M, C] rows, M = N*H*W, passed as N = M, HW = 1),
// called by batchnorm.cu's table entries; same formulas, dtypes and statistics types as
// there. batchnorm.cu's per-channel blocks would read a channel C elements apart (one
// element per memory sector); here a block is 32 channel lanes x 8 row lanes, so a warp
// reads 32 adjacent channels of one row (coalesced), on a (row splits S, channel tiles)
// grid of about 2048 blocks. Block (s, tile) sums its rows of its 32 channels in double
// (thread (lane, r) takes rows m0 + r, m0 + r + 8, ...), adds the 8 row lanes in order
// r = 0..7 and writes one partial per channel into a workspace-tagged [C][S] scratch array;
// the next pass adds a channel's S partials in split order (thread (lane, 0)). Splits and
// orders depend on the shapes only: bitwise reproducible run to run, no atomics.
//   training forward: sum(x) -> mean; sum((x-mean)^2) -> var; y = x * P(w*invstd) +
//     P(b - mean*w*invstd), split 0 writing save_mean/invstd and the running stats.
//   eval forward and eval dx-only backward: one elementwise pass (c = index mod C).
//   backward with sums: {sum dy, sum dy*(x-mean)}; then dbias/dweight (split 0) and dx.
//   relu (fused BatchNorm + ReLU): relu on the store, dy read through the output's mask.
// Not yet run on a GPU (no device at the time of writing): the kit's parity rows
// batch_norm_cl_* check it against the CPU's batchnorm_rows_cpu.cpp.
#include "kernels/cuda/batchnorm_nhwc.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"

#include "kernels/cuda/bn_math.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/dense_common.cuh"

namespace oomlab {
namespace {
namespace dense = cuda::dense;
using cuda::compute_t;
using cuda::ld;
using cuda::st;

constexpr int kLanes = 32, kRows = 8;   // block: 32 channels x 8 rows

struct NhwcSplit {
  int64_t S, chunk;
  dim3 grid, block{unsigned(kLanes), unsigned(kRows)};
  NhwcSplit(int64_t M, int64_t C) {
    const int64_t tiles = (C + kLanes - 1) / kLanes;
    const int64_t by_size = (M + kRows * 8 - 1) / (kRows * 8);   // >= 8 rows per thread
    const int64_t by_grid = 2048 / tiles > 0 ? 2048 / tiles : 1;
    S = std::max<int64_t>(1, std::min<int64_t>({by_size, by_grid, 65535}));
    chunk = (M + S - 1) / S;
    grid = dim3{unsigned(S), unsigned(std::min<int64_t>(tiles, 65535))};
  }
};

template <class T> __device__ __forceinline__ T bn_out(compute_t<T> v, bool relu) {
  return relu && !(v > 0 || v != v) ? st<T>(compute_t<T>(0)) : st<T>(v);
}
template <class T> __device__ __forceinline__ compute_t<T> masked_dy(const T* dy, const T* ym, int64_t o) {
  return ym && ld(ym[o]) <= compute_t<T>(0) ? compute_t<T>(0) : ld(dy[o]);
}

// This block's partials: f(o, c, acc) adds element o's NV terms of channel c; the 8 row
// lanes are added in order and thread (lane, 0) writes part[(c*S + s)*NV + k].
template <int NV, class F>
__device__ void block_partials(int64_t M, int64_t C, int64_t S, int64_t chunk, double* part, F f) {
  __shared__ double sh[kRows][kLanes][NV];
  const int64_t c = int64_t(blockIdx.y) * kLanes + threadIdx.x;
  const int64_t m0 = int64_t(blockIdx.x) * chunk, m1 = m0 + chunk < M ? m0 + chunk : M;
  double acc[NV];
#pragma unroll
  for (int k = 0; k < NV; ++k) acc[k] = 0.0;
  if (c < C)
    for (int64_t m = m0 + threadIdx.y; m < m1; m += kRows) f(m * C + c, c, acc);
#pragma unroll
  for (int k = 0; k < NV; ++k) sh[threadIdx.y][threadIdx.x][k] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < C)
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      double t = 0.0;
      for (int r = 0; r < kRows; ++r) t += sh[r][threadIdx.x][k];
      part[(c * S + blockIdx.x) * NV + k] = t;
    }
}

// Channel c's totals over its S partials, in split order, handed to every thread of the block.
template <int NV> __device__ void channel_totals(const double* part, int64_t C, int64_t S, double (&tot)[NV]) {
  __shared__ double sh[kLanes][NV];
  const int64_t c = int64_t(blockIdx.y) * kLanes + threadIdx.x;
  if (threadIdx.y == 0 && c < C)
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      double t = 0.0;
      for (int64_t s = 0; s < S; ++s) t += part[(c * S + s) * NV + k];
      sh[threadIdx.x][k] = t;
    }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < NV; ++k) tot[k] = c < C ? sh[threadIdx.x][k] : 0.0;
}

// Visits this block's elements of its own channel: f(o).
template <class F> __device__ __forceinline__ void for_rows(int64_t M, int64_t C, int64_t chunk, F f) {
  const int64_t c = int64_t(blockIdx.y) * kLanes + threadIdx.x;
  if (c >= C) return;
  const int64_t m0 = int64_t(blockIdx.x) * chunk, m1 = m0 + chunk < M ? m0 + chunk : M;
  for (int64_t m = m0 + threadIdx.y; m < m1; m += kRows) f(m * C + c);
}

template <class T>
__global__ void sum_kernel(const T* __restrict__ x, int64_t M, int64_t C, int64_t S, int64_t chunk, double* part1) {
  block_partials<1>(M, C, S, chunk, part1, [&](int64_t o, int64_t, double* acc) { acc[0] += double(ld(x[o])); });
}

template <class T>
__global__ void sqdev_kernel(const T* __restrict__ x, int64_t M, int64_t C, int64_t S, int64_t chunk,
                             const double* part1, double* part2) {
  double tot[1];
  channel_totals<1>(part1, C, S, tot);
  const double mean = tot[0] / double(M);
  block_partials<1>(M, C, S, chunk, part2, [&](int64_t o, int64_t, double* acc) {
    const double d = double(ld(x[o])) - mean;
    acc[0] += d * d;
  });
}

struct ForwardParams { double eps, momentum; bool relu; };

template <class T, class P = compute_t<T>>
__global__ void train_apply_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t M, int64_t C, int64_t S,
                                   int64_t chunk, const double* part1, const double* part2, ForwardParams fp,
                                   const P* w, const P* b, P* rm, P* rv, P* sm, P* si) {
  double s[1], ss[1];
  channel_totals<1>(part1, C, S, s);
  __syncthreads();   // channel_totals' shared array is reused by the second call
  channel_totals<1>(part2, C, S, ss);
  const int64_t c = int64_t(blockIdx.y) * kLanes + threadIdx.x;
  if (c >= C) return;
  const double mean = s[0] / double(M), var = ss[0] / double(M);
  const double invstd = 1.0 / sqrt(var + fp.eps);
  if (blockIdx.x == 0 && threadIdx.y == 0) {
    if (sm) sm[c] = P(mean);
    if (si) si[c] = P(invstd);
    if (rm) {
      rm[c] = P((1.0 - fp.momentum) * double(rm[c]) + fp.momentum * mean);
      rv[c] = P((1.0 - fp.momentum) * double(rv[c]) + fp.momentum * ss[0] / double(M - 1));
    }
  }
  const double sc = w ? double(w[c]) * invstd : invstd;
  const P scale = P(sc), shift = P((b ? double(b[c]) : 0.0) - mean * sc);
  for_rows(M, C, chunk, [&](int64_t o) { y[o] = bn_out<T>(ld(x[o]) * scale + shift, fp.relu); });
}

// Eval forward, one elementwise pass over the M*C elements.
template <class T, class P = compute_t<T>>
__global__ void eval_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, int64_t C, double eps,
                                    const P* w, const P* b, const P* rm, const P* rv, bool relu) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = o % C;
    const double mean = double(rm[c]), invstd = 1.0 / sqrt(double(rv[c]) + eps);
    const double sc = w ? double(w[c]) * invstd : invstd;
    const P scale = P(sc), shift = P((b ? double(b[c]) : 0.0) - mean * sc);
    y[o] = bn_out<T>(ld(x[o]) * scale + shift, relu);
  }
}

// What a backward pass reads: its mode, the statistics' sources, the relu mask.
template <class P> struct BackwardSrc {
  bool training, need_xmu;
  double eps;
  const P *rm, *rv, *sm, *si;
  __device__ void stats(int64_t c, double& mean, double& invstd) const {
    mean = 0.0;
    invstd = 0.0;
    if (training) {
      if (need_xmu) mean = double(sm[c]);
      if (si) invstd = double(si[c]);
    } else {
      if (need_xmu) mean = double(rm[c]);
      if (rv) invstd = 1.0 / sqrt(double(rv[c]) + eps);
    }
  }
};

template <class T, class P = compute_t<T>>
__global__ void eval_dx_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t n, int64_t C, const P* w,
                               BackwardSrc<P> src, const T* ym) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = o % C;
    double mean, invstd;
    src.stats(c, mean, invstd);
    dx[o] = st<T>(P((w ? double(w[c]) : 1.0) * invstd) * masked_dy(dy, ym, o));
  }
}

template <class T, class P = compute_t<T>>
__global__ void backward_sums_kernel(const T* __restrict__ dy, const T* __restrict__ x, int64_t M, int64_t C,
                                     int64_t S, int64_t chunk, BackwardSrc<P> src, double* part, const T* ym) {
  const int64_t c = int64_t(blockIdx.y) * kLanes + threadIdx.x;
  double mean = 0.0, invstd = 0.0;
  if (c < C) src.stats(c, mean, invstd);
  block_partials<2>(M, C, S, chunk, part, [&](int64_t o, int64_t, double* acc) {
    const double g = double(masked_dy(dy, ym, o));
    acc[0] += g;
    if (src.need_xmu) acc[1] += g * (double(ld(x[o])) - mean);
  });
}

template <class T, class P = compute_t<T>>
__global__ void backward_apply_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                                      int64_t M, int64_t C, int64_t S, int64_t chunk, BackwardSrc<P> src,
                                      const P* w, const double* part, P* dw, P* db, const T* ym) {
  double tot[2];
  channel_totals<2>(part, C, S, tot);
  const int64_t c = int64_t(blockIdx.y) * kLanes + threadIdx.x;
  if (c >= C) return;
  double mean, invstd;
  src.stats(c, mean, invstd);
  const double sum_dy = tot[0], sum_dy_xmu = tot[1];
  if (blockIdx.x == 0 && threadIdx.y == 0) {
    if (db) db[c] = P(sum_dy);
    if (dw) dw[c] = P(sum_dy_xmu * invstd);
  }
  if (!dx) return;
  const P wt = P((w ? double(w[c]) : 1.0) * invstd);
  if (src.training) {
    const P mu = P(mean), dmean = P(sum_dy / double(M)), k = P(invstd * invstd * sum_dy_xmu / double(M));
    for_rows(M, C, chunk, [&](int64_t o) { dx[o] = st<T>((masked_dy(dy, ym, o) - dmean - (ld(x[o]) - mu) * k) * wt); });
  } else {
    for_rows(M, C, chunk, [&](int64_t o) { dx[o] = st<T>(wt * masked_dy(dy, ym, o)); });
  }
}

template <class T> void forward(const BatchNormArgs& a) {
  using P = compute_t<T>;
  const int64_t M = a.N, C = a.C;
  if (M * C == 0) return;
  const int dev = cuda::kernel_device("batch_norm");
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::compute_stream(dev);
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const P* w = static_cast<const P*>(a.weight);
  const P* b = static_cast<const P*>(a.bias);
  if (!a.training) {
    const int64_t n = M * C;
    eval_forward_kernel<T><<<dense::grid_for(n), dense::kBlock, 0, stream>>>(
        x, y, n, C, a.eps, w, b, static_cast<const P*>(a.running_mean), static_cast<const P*>(a.running_var), a.relu);
    CUDA_LAUNCH_CHECK();
    return;
  }
  const NhwcSplit sp(M, C);
  cuda::DeviceBuffer scratch(dev, size_t(2 * C * sp.S) * sizeof(double));   // freed on return (stream-ordered reuse)
  double* part1 = static_cast<double*>(scratch.get());
  double* part2 = part1 + C * sp.S;
  sum_kernel<T><<<sp.grid, sp.block, 0, stream>>>(x, M, C, sp.S, sp.chunk, part1);
  CUDA_LAUNCH_CHECK();
  sqdev_kernel<T><<<sp.grid, sp.block, 0, stream>>>(x, M, C, sp.S, sp.chunk, part1, part2);
  CUDA_LAUNCH_CHECK();
  train_apply_kernel<T><<<sp.grid, sp.block, 0, stream>>>(
      x, y, M, C, sp.S, sp.chunk, part1, part2, ForwardParams{a.eps, a.momentum, a.relu}, w, b,
      static_cast<P*>(a.running_mean), static_cast<P*>(a.running_var), static_cast<P*>(a.save_mean),
      static_cast<P*>(a.save_invstd));
  CUDA_LAUNCH_CHECK();
}

template <class T> void backward(const BatchNormArgs& a) {
  using P = compute_t<T>;
  const int64_t M = a.N, C = a.C;
  if (C == 0 || !(a.dx || a.dweight || a.dbias)) return;
  const int dev = cuda::kernel_device("batch_norm_backward");
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::compute_stream(dev);
  const bool need_sums = a.dweight || a.dbias || (a.dx && a.training);
  const BackwardSrc<P> src{a.training, bool(a.dweight || (a.dx && a.training)), a.eps,
                           static_cast<const P*>(a.running_mean), static_cast<const P*>(a.running_var),
                           static_cast<const P*>(a.save_mean), static_cast<const P*>(a.save_invstd)};
  const T* dy = static_cast<const T*>(a.dy);
  const T* x = static_cast<const T*>(a.x);
  const P* w = static_cast<const P*>(a.weight);
  const T* ym = a.relu ? static_cast<const T*>(a.y) : nullptr;
  if (!need_sums) {   // eval, dx only
    const int64_t n = M * C;
    if (n == 0) return;
    eval_dx_kernel<T><<<dense::grid_for(n), dense::kBlock, 0, stream>>>(dy, static_cast<T*>(a.dx), n, C, w, src, ym);
    CUDA_LAUNCH_CHECK();
    return;
  }
  const NhwcSplit sp(M, C);
  cuda::DeviceBuffer scratch(dev, size_t(2 * C * sp.S) * sizeof(double));
  double* part = static_cast<double*>(scratch.get());
  backward_sums_kernel<T><<<sp.grid, sp.block, 0, stream>>>(dy, x, M, C, sp.S, sp.chunk, src, part, ym);
  CUDA_LAUNCH_CHECK();
  backward_apply_kernel<T><<<sp.grid, sp.block, 0, stream>>>(dy, x, static_cast<T*>(a.dx), M, C, sp.S, sp.chunk, src,
                                                              w, part, static_cast<P*>(a.dweight),
                                                              static_cast<P*>(a.dbias), ym);
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void batch_norm_forward_nhwc_cuda(const BatchNormArgs& a, DType t) {
  switch (t) {
    case DType::f32: return forward<float>(a);
    case DType::f64: return forward<double>(a);
    case DType::f16: return forward<__half>(a);
    case DType::bf16: return forward<__nv_bfloat16>(a);
    default: throw InternalError(str_cat("batch_norm (channels_last, cuda): unsupported dtype ", dtype_name(t)));
  }
}

void batch_norm_backward_nhwc_cuda(const BatchNormArgs& a, DType t) {
  switch (t) {
    case DType::f32: return backward<float>(a);
    case DType::f64: return backward<double>(a);
    case DType::f16: return backward<__half>(a);
    case DType::bf16: return backward<__nv_bfloat16>(a);
    default: throw InternalError(str_cat("batch_norm_backward (channels_last, cuda): unsupported dtype ", dtype_name(t)));
  }
}

}  // namespace oomlab
