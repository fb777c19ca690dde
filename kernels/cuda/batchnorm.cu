// batchnorm.cu — CUDA batch_norm forward/backward (float32, float64, and float16 / bfloat16
// inputs) with the semantics of kernels/cpu/batchnorm_cpu.cpp. x is viewed as [N, C, HW];
// weight/bias/running/saved stats have the input's compute type P = compute_t<T>: the
// input's own for float32 / float64, float32 for 16-bit inputs (cuDNN's rule; the op checks
// it). 16-bit data is widened on load and rounded once at the store, as the CPU's 16-bit
// kernel (widen, float32 kernel, round back) does.
// Per-channel sums run on a (S splits, channels) grid, S = dense::channel_splits(M, C)
// (about 2048 blocks in all, so that 64-channel layers with M = N*HW in the millions
// fill the GPU): block (s, c) sums its chunk of channel c in double, writes one partial
// into a workspace-tagged [C][S] scratch array, and the next pass adds the S partials of
// its channel in order s = 0, 1, ... (thread 0; every block gets the same value). Results
// depend on the shapes only: bitwise reproducible run to run, no atomics.
//   training forward, float64: pass 1 sum(x) -> mean; pass 2 sum((x-mean)^2) -> biased var,
//     invstd = 1/sqrt(var + eps); pass 3 y = x * T(w*invstd) + T(b - mean*w*invstd), and
//     block s = 0 writes save_mean/save_invstd and the running stats (momentum; running_var
//     from the unbiased variance). Two passes over x for the statistics, as the CPU.
//   training forward, float32 and 16-bit (one pass for the statistics, issue 31; it passed
//     the parity rows on the H200 and the H100): pass 1 shifted sums {sum(x-K), sum((x-K)^2)},
//     K the channel's first element (bn_math.cuh); pass 2 as pass 3 above with those
//     statistics. Two reads of x instead of three; mean and var agree with the two-pass ones
//     to about 1e-16 relative, within 1 float32 ulp (kernels/cuda/check/bn_stats_check.cu);
//     float64 keeps two passes: a shift far from the mean costs digits it would show.
//   eval forward: the running stats, one pass.
//   backward with sums (training, or eval with dweight/dbias): pass 1 sum(dy) and
//     sum(dy*(x-mean)); pass 2 dbias/dweight (block s = 0) and dx: training dx = (dy -
//     mean(dy) - (x-mean) * invstd^2 * mean(dy*(x-mean))) * w*invstd, eval dx = w*invstd*dy.
//     Stats from save_mean/invstd (training) or the running stats (eval); invstd's source
//     may be absent when only dbias is requested.
//   eval backward, dx only: one pass.
//   fused BatchNorm + ReLU (a.relu): every forward stores relu(y); every backward reads dy
//     through the mask of the saved output a.y (bn_out / masked_dy).
// channels_last inputs (a.channels_last, [M, C] rows) take batchnorm_nhwc.cu's kernels.
#include <cmath>
#include <type_traits>

#include "kernels/batchnorm.h"
#include "kernels/cuda/batchnorm_nhwc.h"
#include "kernels/cuda/bn_math.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/dense_common.cuh"

namespace oomlab {
namespace {
namespace dense = cuda::dense;

using dense::ChannelSplit;
using dense::channel_totals;
using dense::chunk_of;
using cuda::compute_t;
using cuda::ShiftedStats;
using cuda::stats_from_shifted_sums;
using cuda::ld;
using cuda::st;

// Fused BatchNorm + ReLU (a.relu): the forward's store and the backward's read of dy,
// bit-identical to batch_norm followed by relu (activation.cu's ReluFwd / ReluBwd).
template <class T> __device__ __forceinline__ T bn_out(compute_t<T> v, bool relu) {
  return relu && !(v > 0 || v != v) ? st<T>(compute_t<T>(0)) : st<T>(v);
}
template <class T> __device__ __forceinline__ compute_t<T> masked_dy(const T* dy, const T* ym, int64_t o) {
  return ym && ld(ym[o]) <= compute_t<T>(0) ? compute_t<T>(0) : ld(dy[o]);
}

// Training forward, pass 1: part1[c][s] = sum of x over the chunk.
template <class T>
__global__ void bn_sum_kernel(const T* __restrict__ x, int64_t C, int64_t HW, int64_t M, int64_t S, int64_t chunk,
                              double* part1) {
  int64_t m0, m1;
  chunk_of(M, chunk, m0, m1);
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    double s[1] = {0.0};
    dense::for_channel(c, C, HW, m0, m1, [&](int64_t o) { s[0] += double(ld(x[o])); });
    dense::block_allsum<1>(s);
    if (threadIdx.x == 0) part1[c * S + blockIdx.x] = s[0];
  }
}

// Training forward, pass 2: part2[c][s] = sum of (x - mean)^2 over the chunk.
template <class T>
__global__ void bn_sqdev_kernel(const T* __restrict__ x, int64_t C, int64_t HW, int64_t M, int64_t S, int64_t chunk,
                                const double* part1, double* part2) {
  int64_t m0, m1;
  chunk_of(M, chunk, m0, m1);
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    double tot[1];
    channel_totals<1>(part1, c, S, tot);
    const double mean = tot[0] / double(M);
    double ss[1] = {0.0};
    dense::for_channel(c, C, HW, m0, m1, [&](int64_t o) {
      const double d = double(ld(x[o])) - mean;
      ss[0] += d * d;
    });
    dense::block_allsum<1>(ss);
    if (threadIdx.x == 0) part2[c * S + blockIdx.x] = ss[0];
  }
}

// One-pass training forward, pass 1: part1[(c*S + s)*2 + {0,1}] = {sum(x-K), sum((x-K)^2)}
// over the chunk, K = the channel's first element x[0, c, 0].
template <class T>
__global__ void bn_shifted_sums_kernel(const T* __restrict__ x, int64_t C, int64_t HW, int64_t M, int64_t S,
                                       int64_t chunk, double* part1) {
  int64_t m0, m1;
  chunk_of(M, chunk, m0, m1);
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    const double K = double(ld(x[c * HW]));
    double acc[2] = {0.0, 0.0};
    dense::for_channel(c, C, HW, m0, m1, [&](int64_t o) {
      const double d = double(ld(x[o])) - K;
      acc[0] += d;
      acc[1] += d * d;
    });
    dense::block_allsum<2>(acc);
    if (threadIdx.x == 0) {
      part1[(c * S + blockIdx.x) * 2] = acc[0];
      part1[(c * S + blockIdx.x) * 2 + 1] = acc[1];
    }
  }
}

// The channel's batch mean and biased variance from the pass-1 partials: two-pass
// (part1 = sums, part2 = squared deviations: the values the two-pass kernels always
// computed) or one-pass (part1 = shifted sums, part2 unused).
template <class T, bool OnePass>
__device__ __forceinline__ ShiftedStats channel_stats(const T* x, int64_t c, int64_t HW, int64_t M, int64_t S,
                                                      const double* part1, const double* part2) {
  if constexpr (OnePass) {
    double t[2];
    channel_totals<2>(part1, c, S, t);
    return stats_from_shifted_sums(double(ld(x[c * HW])), t[0], t[1], M);
  } else {
    double s[1], ss[1];
    channel_totals<1>(part1, c, S, s);
    channel_totals<1>(part2, c, S, ss);
    return {s[0] / double(M), ss[0] / double(M), ss[0] / double(M - 1)};
  }
}

// Training forward, pass 3: statistics from the partials, y for the chunk; block s = 0
// writes the saved and running statistics.
template <class T, bool OnePass, class P = compute_t<T>>
__global__ void bn_train_apply_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t C, int64_t HW, int64_t M,
                                      int64_t S, int64_t chunk, const double* part1, const double* part2, double eps,
                                      double momentum, const P* w, const P* b, P* rm, P* rv, P* sm, P* si,
                                      bool relu) {
  int64_t m0, m1;
  chunk_of(M, chunk, m0, m1);
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    const ShiftedStats stats = channel_stats<T, OnePass>(x, c, HW, M, S, part1, part2);
    const double mean = stats.mean;
    const double invstd = 1.0 / sqrt(stats.var + eps);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      if (sm) sm[c] = P(mean);
      if (si) si[c] = P(invstd);
      if (rm) {
        rm[c] = P((1.0 - momentum) * double(rm[c]) + momentum * mean);
        rv[c] = P((1.0 - momentum) * double(rv[c]) + momentum * stats.var_unbiased);
      }
    }
    const double sc = w ? double(w[c]) * invstd : invstd;
    const P scale = P(sc), shift = P((b ? double(b[c]) : 0.0) - mean * sc);
    dense::for_channel(c, C, HW, m0, m1, [&](int64_t o) { y[o] = bn_out<T>(ld(x[o]) * scale + shift, relu); });
  }
}

// Eval forward: y = x * T(w*invstd) + T(b - mean*w*invstd) from the running stats; each
// block derives its channel's coefficients itself.
template <class T, class P = compute_t<T>>
__global__ void bn_eval_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t C, int64_t HW, int64_t M,
                                       int64_t chunk, double eps, const P* w, const P* b, const P* rm, const P* rv,
                                       bool relu) {
  int64_t m0, m1;
  chunk_of(M, chunk, m0, m1);
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    const double mean = double(rm[c]), invstd = 1.0 / sqrt(double(rv[c]) + eps);
    const double sc = w ? double(w[c]) * invstd : invstd;
    const P scale = P(sc), shift = P((b ? double(b[c]) : 0.0) - mean * sc);
    dense::for_channel(c, C, HW, m0, m1, [&](int64_t o) { y[o] = bn_out<T>(ld(x[o]) * scale + shift, relu); });
  }
}

// The mean and invstd a backward pass uses (0 where its source is absent or unneeded).
template <class P>
__device__ __forceinline__ void backward_stats(int64_t c, bool training, bool need_xmu, double eps, const P* rm,
                                               const P* rv, const P* sm, const P* si, double& mean, double& invstd) {
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

// Backward, pass 1: part[c][s] = {sum dy, sum dy*(x-mean)} over the chunk (the second only
// when need_xmu, else 0).
template <class T, class P = compute_t<T>>
__global__ void bn_backward_sums_kernel(const T* __restrict__ dy, const T* __restrict__ x, int64_t C, int64_t HW,
                                        int64_t M, int64_t S, int64_t chunk, bool training, bool need_xmu,
                                        double eps, const P* rm, const P* rv, const P* sm, const P* si,
                                        double* part, const T* ym) {
  int64_t m0, m1;
  chunk_of(M, chunk, m0, m1);
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    double mean, invstd;
    backward_stats(c, training, need_xmu, eps, rm, rv, sm, si, mean, invstd);
    double acc[2] = {0.0, 0.0};
    if (need_xmu) {
      dense::for_channel(c, C, HW, m0, m1, [&](int64_t o) {
        const double g = double(masked_dy(dy, ym, o));
        acc[0] += g;
        acc[1] += g * (double(ld(x[o])) - mean);
      });
    } else {
      dense::for_channel(c, C, HW, m0, m1, [&](int64_t o) { acc[0] += double(masked_dy(dy, ym, o)); });
    }
    dense::block_allsum<2>(acc);
    if (threadIdx.x == 0) {
      part[(c * S + blockIdx.x) * 2] = acc[0];
      part[(c * S + blockIdx.x) * 2 + 1] = acc[1];
    }
  }
}

// Backward, pass 2: dbias/dweight (block s = 0) and dx for the chunk.
template <class T, class P = compute_t<T>>
__global__ void bn_backward_apply_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx,
                                         int64_t C, int64_t HW, int64_t M, int64_t S, int64_t chunk, bool training,
                                         bool need_xmu, double eps, const P* w, const P* rm, const P* rv,
                                         const P* sm, const P* si, const double* part, P* dw, P* db, const T* ym) {
  int64_t m0, m1;
  chunk_of(M, chunk, m0, m1);
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    double mean, invstd;
    backward_stats(c, training, need_xmu, eps, rm, rv, sm, si, mean, invstd);
    double tot[2];
    channel_totals<2>(part, c, S, tot);
    const double sum_dy = tot[0], sum_dy_xmu = tot[1];
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      if (db) db[c] = P(sum_dy);
      if (dw) dw[c] = P(sum_dy_xmu * invstd);
    }
    if (!dx) continue;
    const double wi = (w ? double(w[c]) : 1.0) * invstd;
    const P wt = P(wi);
    if (training) {
      const P mu = P(mean), dmean = P(sum_dy / double(M)), k = P(invstd * invstd * sum_dy_xmu / double(M));
      dense::for_channel(c, C, HW, m0, m1,
                         [&](int64_t o) { dx[o] = st<T>((masked_dy(dy, ym, o) - dmean - (ld(x[o]) - mu) * k) * wt); });
    } else {
      dense::for_channel(c, C, HW, m0, m1, [&](int64_t o) { dx[o] = st<T>(wt * masked_dy(dy, ym, o)); });
    }
  }
}

// Eval backward when only dx is needed: dx = T(w*invstd) * dy.
template <class T, class P = compute_t<T>>
__global__ void bn_eval_dx_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t C, int64_t HW, int64_t M,
                                  int64_t chunk, double eps, const P* w, const P* rv, const T* ym) {
  int64_t m0, m1;
  chunk_of(M, chunk, m0, m1);
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    const P wt = P((w ? double(w[c]) : 1.0) * (1.0 / sqrt(double(rv[c]) + eps)));
    dense::for_channel(c, C, HW, m0, m1, [&](int64_t o) { dx[o] = st<T>(wt * masked_dy(dy, ym, o)); });
  }
}

template <class T> constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  else if constexpr (std::is_same_v<T, double>) return DType::f64;
  else if constexpr (std::is_same_v<T, __half>) return DType::f16;
  else return DType::bf16;
}

template <class T> void batch_norm_forward_cuda(const BatchNormArgs& a) {
  if (a.channels_last) return batch_norm_forward_nhwc_cuda(a, dtype_of<T>());   // batchnorm_nhwc.cu
  using P = compute_t<T>;
  const int64_t C = a.C, HW = a.HW, M = a.N * HW;
  if (M * C == 0) return;
  const int dev = cuda::kernel_device("batch_norm");
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::compute_stream(dev);
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const P* w = static_cast<const P*>(a.weight);
  const P* b = static_cast<const P*>(a.bias);
  P* rm = static_cast<P*>(a.running_mean);
  P* rv = static_cast<P*>(a.running_var);
  OOMLAB_ASSERT((rm == nullptr) == (rv == nullptr));
  const ChannelSplit sp(M, C);
  constexpr int kT = dense::kChanThreads;
  if (!a.training) {
    OOMLAB_ASSERT(rm != nullptr);
    bn_eval_forward_kernel<T><<<sp.grid, kT, 0, stream>>>(x, y, C, HW, M, sp.chunk, a.eps, w, b, rm, rv, a.relu);
    CUDA_LAUNCH_CHECK();
    return;
  }
  // Freed on return: later work on the stream that reuses the block runs after these passes.
  cuda::DeviceBuffer scratch(dev, size_t(2 * C * sp.S) * sizeof(double));
  double* part1 = static_cast<double*>(scratch.get());
  double* part2 = part1 + C * sp.S;
  P* sm = static_cast<P*>(a.save_mean);
  P* si = static_cast<P*>(a.save_invstd);
  if constexpr (!std::is_same_v<T, double>) {   // float64: two-pass digits (bn_math.cuh)
    bn_shifted_sums_kernel<T><<<sp.grid, kT, 0, stream>>>(x, C, HW, M, sp.S, sp.chunk, part1);
    CUDA_LAUNCH_CHECK();
    bn_train_apply_kernel<T, true><<<sp.grid, kT, 0, stream>>>(x, y, C, HW, M, sp.S, sp.chunk, part1, nullptr, a.eps,
                                                               a.momentum, w, b, rm, rv, sm, si, a.relu);
    CUDA_LAUNCH_CHECK();
  } else {   // the two-pass kernels exist for float64 only
    bn_sum_kernel<T><<<sp.grid, kT, 0, stream>>>(x, C, HW, M, sp.S, sp.chunk, part1);
    CUDA_LAUNCH_CHECK();
    bn_sqdev_kernel<T><<<sp.grid, kT, 0, stream>>>(x, C, HW, M, sp.S, sp.chunk, part1, part2);
    CUDA_LAUNCH_CHECK();
    bn_train_apply_kernel<T, false><<<sp.grid, kT, 0, stream>>>(x, y, C, HW, M, sp.S, sp.chunk, part1, part2, a.eps,
                                                                a.momentum, w, b, rm, rv, sm, si, a.relu);
    CUDA_LAUNCH_CHECK();
  }
}

template <class T> void batch_norm_backward_cuda(const BatchNormArgs& a) {
  if (a.channels_last) return batch_norm_backward_nhwc_cuda(a, dtype_of<T>());
  using P = compute_t<T>;
  const int64_t C = a.C, HW = a.HW, M = a.N * HW;
  if (C == 0) return;
  const void* anchor = a.dx ? a.dx : (a.dweight ? a.dweight : a.dbias);
  if (!anchor) return;   // nothing requested
  const int dev = cuda::kernel_device("batch_norm_backward");
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::compute_stream(dev);
  const bool need_sums = a.dweight || a.dbias || (a.dx && a.training);
  const bool need_xmu = a.dweight || (a.dx && a.training);
  const T* dy = static_cast<const T*>(a.dy);
  const T* x = static_cast<const T*>(a.x);
  const P* w = static_cast<const P*>(a.weight);
  const P* rm = static_cast<const P*>(a.running_mean);
  const P* rv = static_cast<const P*>(a.running_var);
  const P* sm = static_cast<const P*>(a.save_mean);
  const P* si = static_cast<const P*>(a.save_invstd);
  const T* ym = a.relu ? static_cast<const T*>(a.y) : nullptr;   // fused relu: the forward's output
  const ChannelSplit sp(M, C);
  constexpr int kT = dense::kChanThreads;
  if (!need_sums) {   // eval, dx only
    if (M == 0) return;
    OOMLAB_ASSERT(rv != nullptr);
    bn_eval_dx_kernel<T><<<sp.grid, kT, 0, stream>>>(dy, static_cast<T*>(a.dx), C, HW, M, sp.chunk, a.eps, w, rv, ym);
    CUDA_LAUNCH_CHECK();
    return;
  }
  cuda::DeviceBuffer scratch(dev, size_t(2 * C * sp.S) * sizeof(double));
  double* part = static_cast<double*>(scratch.get());
  bn_backward_sums_kernel<T><<<sp.grid, kT, 0, stream>>>(dy, x, C, HW, M, sp.S, sp.chunk, a.training, need_xmu,
                                                         a.eps, rm, rv, sm, si, part, ym);
  CUDA_LAUNCH_CHECK();
  bn_backward_apply_kernel<T><<<sp.grid, kT, 0, stream>>>(dy, x, static_cast<T*>(a.dx), C, HW, M, sp.S, sp.chunk,
                                                          a.training, need_xmu, a.eps, w, rm, rv, sm, si, part,
                                                          static_cast<P*>(a.dweight), static_cast<P*>(a.dbias), ym);
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_batchnorm_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(batch_norm_forward_kernels(), batch_norm_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(batch_norm_backward_kernels(), batch_norm_backward_cuda);
}

}  // namespace oomlab
