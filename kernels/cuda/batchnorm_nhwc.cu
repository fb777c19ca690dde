// batchnorm_nhwc.cu — CUDA batch_norm forward/backward for channels_last inputs
// (BatchNormArgs::channels_last: x is [M, C] rows, M = N*H*W, passed as N = M, HW = 1),
// called by batchnorm.cu's table entries; same formulas, dtypes and statistics types as
// there. batchnorm.cu's per-channel blocks would read a channel C elements apart (one
// element per memory sector); here a block is 32 channel lanes x 8 row lanes, so a warp
// reads 32 adjacent channels of one row (coalesced), on a (row splits S, channel tiles)
// grid of about 2048 blocks. Block (s, tile) sums its rows of its 32 channels in double
// (thread (lane, r) takes rows m0 + r, m0 + r + 8, ...), adds the 8 row lanes in order
// r = 0..7 and writes one partial per channel into a workspace-tagged [C][S] scratch array;
// a totals kernel (one thread a channel) adds each channel's S partials once, in split
// order, for the next pass (which used to add them in every block: 3x the NCHW kernels'
// time on an H200). Splits and orders depend on the shapes only: bitwise reproducible run
// to run, no atomics.
//   training forward: sum(x) -> mean; sum((x-mean)^2) -> var; y = x * P(w*invstd) +
//     P(b - mean*w*invstd), split 0 writing save_mean/invstd and the running stats. Under
//     cuda_bn_cl_one_pass() (OOMLAB_CUDA_BN_CL_ONE_PASS=1, default off: not yet run on a GPU)
//     float32 and 16-bit inputs take batchnorm.cu's one-pass statistics instead, shifted
//     sums {sum(x-K), sum((x-K)^2)} in one read of x (bn_math.cuh): two reads of x, not three.
//   eval forward and eval dx-only backward: one elementwise pass (c = index mod C).
//   backward with sums: {sum dy, sum dy*(x-mean)}; then dbias/dweight (split 0) and dx.
//   relu (fused BatchNorm + ReLU): relu on the store, dy read through the output's mask.
// The split kernels' bodies live in batchnorm_nhwc.cuh, so that CPU CI runs them on emulated
// blocks (kernels/cuda/check/bn_nhwc_check.cu). On an H200 (kit runs of cbc8729 and afbeb1e)
// the parity rows batch_norm_cl_* passed; the totals kernel has not run on a GPU yet.
#include "kernels/cuda/batchnorm_nhwc.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "engine/core/error.h"

#include "kernels/cuda/batchnorm_nhwc.cuh"
#include "kernels/cuda/block_ctx.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/dense_common.cuh"

namespace oomlab {
namespace {
namespace dense = cuda::dense;
namespace bn = bn_nhwc;
using cuda::compute_t;
using cuda::DeviceCtx;

using bn::DeviceIO;

template <class T> __global__ void sum_kernel(bn::Split sp, const T* x, double* part1) {
  __shared__ bn::Smem sm;
  bn::sum_body<DeviceIO<T>>(DeviceCtx{}, sp, x, part1, sm);
}
template <class T> __global__ void sqdev_kernel(bn::Split sp, const T* x, const double* tot1, double* part2) {
  __shared__ bn::Smem sm;
  bn::sqdev_body<DeviceIO<T>>(DeviceCtx{}, sp, x, tot1, part2, sm);
}
template <class T> __global__ void shifted_sums_kernel(bn::Split sp, const T* x, double* part) {
  __shared__ bn::Smem sm;
  bn::shifted_sums_body<DeviceIO<T>>(DeviceCtx{}, sp, x, part, sm);
}
template <class T, class P = compute_t<T>>
__global__ void train_apply_kernel(bn::Split sp, const T* x, T* y, bn::TrainStats<DeviceIO<T>, T> ts, bn::Stats st,
                                   const P* w, const P* b, P* rm, P* rv, P* smean, P* sinv) {
  bn::train_apply_body<DeviceIO<T>>(DeviceCtx{}, sp, x, y, ts, st, w, b, rm, rv, smean, sinv);
}
// One thread a channel: its S partials in split order (bn::channel_total).
template <int NV> __global__ void totals_kernel(bn::Split sp, const double* part, double* tot) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c < sp.C) bn::channel_total<NV>(sp, part, c, tot);
}
template <int NV> void launch_totals(const bn::Split& sp, const double* part, double* tot, cudaStream_t stream) {
  totals_kernel<NV><<<unsigned((sp.C + 127) / 128), 128, 0, stream>>>(sp, part, tot);
  CUDA_LAUNCH_CHECK();
}
template <class T, class P = compute_t<T>>
__global__ void backward_sums_kernel(bn::Split sp, const T* dy, const T* x, bn::BackwardSrc<P> src, double* part,
                                     const T* ym) {
  __shared__ bn::Smem sm;
  bn::backward_sums_body<DeviceIO<T>>(DeviceCtx{}, sp, dy, x, src, part, ym, sm);
}
template <class T, class P = compute_t<T>>
__global__ void backward_apply_kernel(bn::Split sp, const T* dy, const T* x, T* dx, bn::BackwardSrc<P> src, const P* w,
                                      const double* tot2, P* dw, P* db, const T* ym) {
  bn::backward_apply_body<DeviceIO<T>>(DeviceCtx{}, sp, dy, x, dx, src, w, tot2, dw, db, ym);
}

// Eval forward and eval dx-only backward: one elementwise pass over the M*C elements.
template <class T, class P = compute_t<T>>
__global__ void eval_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, int64_t C, double eps,
                                    const P* w, const P* b, const P* rm, const P* rv, bool relu) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = o % C;
    const double mean = double(rm[c]), invstd = 1.0 / sqrt(double(rv[c]) + eps);
    const double sc = w ? double(w[c]) * invstd : invstd;
    const P scale = P(sc), shift = P((b ? double(b[c]) : 0.0) - mean * sc);
    y[o] = bn::out<DeviceIO<T>, T>(cuda::ld(x[o]) * scale + shift, relu);
  }
}
template <class T, class P = compute_t<T>>
__global__ void eval_dx_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t n, int64_t C, const P* w,
                               bn::BackwardSrc<P> src, const T* ym) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = o % C;
    double mean, invstd;
    src.stats(c, mean, invstd);
    dx[o] = cuda::st<T>(P((w ? double(w[c]) : 1.0) * invstd) * bn::masked<DeviceIO<T>>(dy, ym, o));
  }
}

dim3 grid_of(const bn::Split& sp) { return dim3{unsigned(sp.S), unsigned(std::min<int64_t>(sp.tiles, 65535))}; }

// The training forward's statistics passes: part / tot hold [C][S] partials and [C] totals
// per statistic, 2 * C * (S + 1) doubles. Returns whether they are the one-pass shifted sums.
template <class T> bool launch_statistics(const bn::Split& sp, const T* x, double* part, double* tot,
                                          cudaStream_t stream) {
  if constexpr (!std::is_same_v<T, double>) {   // float64: two-pass digits (bn_math.cuh)
    if (cuda_bn_cl_one_pass()) {
      shifted_sums_kernel<T><<<grid_of(sp), bn::kThreads, 0, stream>>>(sp, x, part);
      CUDA_LAUNCH_CHECK();
      launch_totals<2>(sp, part, tot, stream);
      return true;
    }
  }
  const int64_t C = sp.C;
  sum_kernel<T><<<grid_of(sp), bn::kThreads, 0, stream>>>(sp, x, part);
  CUDA_LAUNCH_CHECK();
  launch_totals<1>(sp, part, tot, stream);
  sqdev_kernel<T><<<grid_of(sp), bn::kThreads, 0, stream>>>(sp, x, tot, part + C * sp.S);
  CUDA_LAUNCH_CHECK();
  launch_totals<1>(sp, part + C * sp.S, tot + C, stream);
  return false;
}

template <class T> void forward(const BatchNormArgs& a) {
  using P = compute_t<T>;
  const int64_t M = a.N, C = a.C;
  if (M * C == 0) return;
  OOMLAB_CHECK_T(ShapeError, (C + bn::kLanes - 1) / bn::kLanes <= 65535, "batch_norm (channels_last, cuda): ", C,
                 " channels exceed the grid");
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
  const bn::Split sp = bn::split_for(M, C);
  // freed on return (stream-ordered reuse): [C][S] partials and [C] totals of each statistic
  // (two-pass: sums, squared deviations; one-pass: the shifted sums' pairs, the same bytes)
  cuda::DeviceBuffer scratch(dev, size_t(2 * C * sp.S + 2 * C) * sizeof(double));
  double* part = static_cast<double*>(scratch.get());
  double* tot = part + 2 * C * sp.S;
  const bn::TrainStats<DeviceIO<T>, T> ts{x, tot, tot + C, launch_statistics<T>(sp, x, part, tot, stream)};
  train_apply_kernel<T><<<grid_of(sp), bn::kThreads, 0, stream>>>(
      sp, x, y, ts, bn::Stats{a.eps, a.momentum, a.relu}, w, b, static_cast<P*>(a.running_mean),
      static_cast<P*>(a.running_var), static_cast<P*>(a.save_mean), static_cast<P*>(a.save_invstd));
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
  const bn::BackwardSrc<P> src{a.training, bool(a.dweight || (a.dx && a.training)), a.eps,
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
  const bn::Split sp = bn::split_for(M, C);
  cuda::DeviceBuffer scratch(dev, size_t(2 * C * sp.S + 2 * C) * sizeof(double));   // [C][S][2] partials, [C][2] totals
  double* part = static_cast<double*>(scratch.get());
  double* tot = part + 2 * C * sp.S;
  backward_sums_kernel<T><<<grid_of(sp), bn::kThreads, 0, stream>>>(sp, dy, x, src, part, ym);
  CUDA_LAUNCH_CHECK();
  launch_totals<2>(sp, part, tot, stream);
  backward_apply_kernel<T><<<grid_of(sp), bn::kThreads, 0, stream>>>(sp, dy, x, static_cast<T*>(a.dx), src, w, tot,
                                                                    static_cast<P*>(a.dweight),
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
    default:
      throw InternalError(str_cat("batch_norm_backward (channels_last, cuda): unsupported dtype ", dtype_name(t)));
  }
}

}  // namespace oomlab
