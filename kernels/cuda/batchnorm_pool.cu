// batchnorm_pool.cu — CUDA kernels for batch_norm forward/backward (float32, float64) and
// max/avg/adaptive-avg pool2d forward/backward (float32, float64, float16, bfloat16),
// with the semantics of kernels/cpu/batchnorm_cpu.cpp and kernels/cpu/pool_cpu.cpp.
// Batch norm (x viewed as [N, C, HW]; weight/bias/running/saved stats of type T): one
// block per channel (dense_common.cuh) computes the statistics in two passes (mean, then
// the sum of squared deviations) with double accumulators, writes save_mean/save_invstd
// (invstd = 1/sqrt(var_biased + eps)) and the running stats (momentum; running_var from
// the unbiased variance), then y = x * T(w*invstd) + T(b - mean*w*invstd) for its channel.
// Eval forward uses the running stats on a (splits, channels) grid. Backward computes
// sum(dy) and sum(dy*(x-mean)) per channel the same way and writes dx, dweight, dbias
// (each optional; all overwritten). No scratch memory. Half inputs are not registered:
// their parameter dtype (f32 or the input's) is not carried by BatchNormArgs.
// Pooling: max takes the first maximum in row-major window order (NaN propagates; the
// last NaN wins, as the CPU kernel's compare), indices flat h*W+w. Avg sums in double and
// divides by the padded extent (count_include_pad); adaptive bins [floor(i*H/P),
// ceil((i+1)*H/P)). Backward kernels gather per input element over the outputs whose
// window holds it, in row-major output order — the order in which the CPU kernels
// scatter — so dx is overwritten without atomics and float/double results match the CPU.
#include <cmath>

#include "engine/ops/batchnorm.h"
#include "engine/ops/pool.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/dense_common.cuh"

namespace oomlab {
namespace {
using cuda::dense::kBlock;
using cuda::dense::Num;
namespace dense = cuda::dense;

// ---- batch norm -----------------------------------------------------------------------

// Training forward, one block per channel: mean, then the sum of squared deviations (two
// passes, double accumulators), saved/running stats by thread 0, then y for the channel.
template <class T>
__global__ void bn_train_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t N, int64_t C, int64_t HW,
                                        double eps, double momentum, const T* w, const T* b, T* rm, T* rv, T* sm,
                                        T* si) {
  const int64_t M = N * HW;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double s[1] = {0.0};
    dense::for_channel(c, C, HW, 0, M, [&](int64_t o) { s[0] += double(x[o]); });
    dense::block_allsum<1>(s);
    const double mean = s[0] / double(M);
    double ss[1] = {0.0};
    dense::for_channel(c, C, HW, 0, M, [&](int64_t o) {
      const double d = double(x[o]) - mean;
      ss[0] += d * d;
    });
    dense::block_allsum<1>(ss);
    const double invstd = 1.0 / sqrt(ss[0] / double(M) + eps);
    if (threadIdx.x == 0) {
      if (sm) sm[c] = T(mean);
      if (si) si[c] = T(invstd);
      if (rm) {
        rm[c] = T((1.0 - momentum) * double(rm[c]) + momentum * mean);
        rv[c] = T((1.0 - momentum) * double(rv[c]) + momentum * ss[0] / double(M - 1));
      }
    }
    const double sc = w ? double(w[c]) * invstd : invstd;
    const T scale = T(sc), shift = T((b ? double(b[c]) : 0.0) - mean * sc);
    dense::for_channel(c, C, HW, 0, M, [&](int64_t o) { y[o] = x[o] * scale + shift; });
  }
}

// Eval forward on a (splits, channels) grid: y = x * T(w*invstd) + T(b - mean*w*invstd)
// from the running stats; each block derives its channel's coefficients itself.
template <class T>
__global__ void bn_eval_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t N, int64_t C, int64_t HW,
                                       double eps, const T* w, const T* b, const T* rm, const T* rv) {
  const int64_t M = N * HW, chunk = (M + gridDim.x - 1) / gridDim.x;
  const int64_t m0 = int64_t(blockIdx.x) * chunk, m1 = m0 + chunk < M ? m0 + chunk : M;
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    const double mean = double(rm[c]), invstd = 1.0 / sqrt(double(rv[c]) + eps);
    const double sc = w ? double(w[c]) * invstd : invstd;
    const T scale = T(sc), shift = T((b ? double(b[c]) : 0.0) - mean * sc);
    dense::for_channel(c, C, HW, m0, m1, [&](int64_t o) { y[o] = x[o] * scale + shift; });
  }
}

// Backward with per-channel sums, one block per channel: sum(dy) and sum(dy*(x-mean))
// (the latter only when need_xmu), dbias/dweight by thread 0, then dx for the channel:
// training dx = (dy - mean(dy) - (x-mean) * invstd^2 * mean(dy*(x-mean))) * w*invstd,
// eval dx = w*invstd * dy. Stats come from save_mean/invstd (training) or the running
// stats (eval); invstd's source may be absent when only dbias is requested.
template <class T>
__global__ void bn_backward_kernel(const T* __restrict__ dy, const T* __restrict__ x, T* __restrict__ dx, int64_t N,
                                   int64_t C, int64_t HW, bool training, bool need_xmu, double eps, const T* w,
                                   const T* rm, const T* rv, const T* sm, const T* si, T* dw, T* db) {
  const int64_t M = N * HW;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double mean = 0.0, invstd = 0.0;
    if (training) {
      if (need_xmu) mean = double(sm[c]);
      if (si) invstd = double(si[c]);
    } else {
      if (need_xmu) mean = double(rm[c]);
      if (rv) invstd = 1.0 / sqrt(double(rv[c]) + eps);
    }
    double acc[2] = {0.0, 0.0};
    if (need_xmu) {
      dense::for_channel(c, C, HW, 0, M, [&](int64_t o) {
        const double g = double(dy[o]);
        acc[0] += g;
        acc[1] += g * (double(x[o]) - mean);
      });
    } else {
      dense::for_channel(c, C, HW, 0, M, [&](int64_t o) { acc[0] += double(dy[o]); });
    }
    dense::block_allsum<2>(acc);
    const double sum_dy = acc[0], sum_dy_xmu = acc[1];
    if (threadIdx.x == 0) {
      if (db) db[c] = T(sum_dy);
      if (dw) dw[c] = T(sum_dy_xmu * invstd);
    }
    if (!dx) continue;
    const double wi = (w ? double(w[c]) : 1.0) * invstd;
    const T wt = T(wi);
    if (training) {
      const T mu = T(mean), dmean = T(sum_dy / double(M)), k = T(invstd * invstd * sum_dy_xmu / double(M));
      dense::for_channel(c, C, HW, 0, M, [&](int64_t o) { dx[o] = (dy[o] - dmean - (x[o] - mu) * k) * wt; });
    } else {
      dense::for_channel(c, C, HW, 0, M, [&](int64_t o) { dx[o] = wt * dy[o]; });
    }
  }
}

// Eval backward when only dx is needed, on a (splits, channels) grid: dx = T(w*invstd) * dy.
template <class T>
__global__ void bn_eval_dx_kernel(const T* __restrict__ dy, T* __restrict__ dx, int64_t N, int64_t C, int64_t HW,
                                  double eps, const T* w, const T* rv) {
  const int64_t M = N * HW, chunk = (M + gridDim.x - 1) / gridDim.x;
  const int64_t m0 = int64_t(blockIdx.x) * chunk, m1 = m0 + chunk < M ? m0 + chunk : M;
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    const T wt = T((w ? double(w[c]) : 1.0) * (1.0 / sqrt(double(rv[c]) + eps)));
    dense::for_channel(c, C, HW, m0, m1, [&](int64_t o) { dx[o] = wt * dy[o]; });
  }
}

dim3 split_grid(int64_t M, int64_t C) {
  return dim3{dense::channel_splits(M, C), dense::channel_grid(C)};
}

template <class T> void batch_norm_forward_cuda(const BatchNormArgs& a) {
  const int64_t C = a.C, HW = a.HW, M = a.N * HW;
  if (M * C == 0) return;
  const int dev = cuda::device_of(a.y, "batch_norm");
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::compute_stream(dev);
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const T* w = static_cast<const T*>(a.weight);
  const T* b = static_cast<const T*>(a.bias);
  T* rm = static_cast<T*>(a.running_mean);
  T* rv = static_cast<T*>(a.running_var);
  OOMLAB_ASSERT((rm == nullptr) == (rv == nullptr));
  if (a.training) {
    bn_train_forward_kernel<T><<<dense::channel_grid(C), dense::kChanThreads, 0, stream>>>(
        x, y, a.N, C, HW, a.eps, a.momentum, w, b, rm, rv, static_cast<T*>(a.save_mean),
        static_cast<T*>(a.save_invstd));
  } else {
    OOMLAB_ASSERT(rm != nullptr);
    bn_eval_forward_kernel<T><<<split_grid(M, C), dense::kChanThreads, 0, stream>>>(x, y, a.N, C, HW, a.eps, w, b,
                                                                                   rm, rv);
  }
  CUDA_LAUNCH_CHECK();
}

template <class T> void batch_norm_backward_cuda(const BatchNormArgs& a) {
  const int64_t C = a.C, HW = a.HW, M = a.N * HW;
  if (C == 0) return;
  const void* anchor = a.dx ? a.dx : (a.dweight ? a.dweight : a.dbias);
  if (!anchor) return;   // nothing requested
  const int dev = cuda::device_of(anchor, "batch_norm_backward");
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::compute_stream(dev);
  const bool need_sums = a.dweight || a.dbias || (a.dx && a.training);
  const bool need_xmu = a.dweight || (a.dx && a.training);
  const T* dy = static_cast<const T*>(a.dy);
  const T* w = static_cast<const T*>(a.weight);
  if (need_sums) {
    bn_backward_kernel<T><<<dense::channel_grid(C), dense::kChanThreads, 0, stream>>>(
        dy, static_cast<const T*>(a.x), static_cast<T*>(a.dx), a.N, C, HW, a.training, need_xmu, a.eps, w,
        static_cast<const T*>(a.running_mean), static_cast<const T*>(a.running_var),
        static_cast<const T*>(a.save_mean), static_cast<const T*>(a.save_invstd), static_cast<T*>(a.dweight),
        static_cast<T*>(a.dbias));
  } else {   // eval, dx only
    if (M == 0) return;
    OOMLAB_ASSERT(a.running_var != nullptr);
    bn_eval_dx_kernel<T><<<split_grid(M, C), dense::kChanThreads, 0, stream>>>(
        dy, static_cast<T*>(a.dx), a.N, C, HW, a.eps, w, static_cast<const T*>(a.running_var));
  }
  CUDA_LAUNCH_CHECK();
}

// ---- pooling --------------------------------------------------------------------------

struct Win { int64_t start, end, extent; };   // [start, end) clipped; extent = padded size

__device__ __forceinline__ Win window(int64_t o, int64_t in, int64_t out, int64_t k, int64_t s, int64_t pad,
                                      bool adaptive) {
  if (adaptive) {
    const int64_t st = (o * in) / out, en = ((o + 1) * in + out - 1) / out;
    return {st, en, en - st};
  }
  const int64_t st = o * s - pad;
  const int64_t en = st + k < in + pad ? st + k : in + pad;
  return {st > 0 ? st : 0, en < in ? en : in, en - st};
}

// Outputs [lo, hi] along one axis whose window may hold input position i (a superset
// for adaptive bins; callers re-check membership).
__device__ __forceinline__ void out_range(int64_t i, int64_t in, int64_t out, int64_t k, int64_t s, int64_t pad,
                                          bool adaptive, int64_t& lo, int64_t& hi) {
  if (adaptive) {
    lo = (i * out) / in;
    hi = ((i + 1) * out - 1) / in;
  } else {
    const int64_t num = i + pad - k + 1;
    lo = num <= 0 ? 0 : (num + s - 1) / s;
    hi = (i + pad) / s;
  }
  if (lo < 0) lo = 0;
  if (hi > out - 1) hi = out - 1;
}

struct PoolDims { int64_t H, W, P, Q, kh, kw, sh, sw, ph, pw; bool adaptive; };

PoolDims pool_dims(const Pool2dArgs& a) {
  return {a.H, a.W, a.P, a.Q, a.p.kernel_h, a.p.kernel_w, a.p.stride_h, a.p.stride_w, a.p.pad_h, a.p.pad_w,
          a.adaptive};
}

template <class T> __global__ void max_pool_forward_kernel(const T* x, T* y, int64_t* idx, PoolDims d, int64_t n) {
  using C = typename Num<T>::C;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % d.Q, t = o / d.Q, oh = t % d.P, nc = t / d.P;
    const Win wh = window(oh, d.H, d.P, d.kh, d.sh, d.ph, false);
    const Win ww = window(ow, d.W, d.Q, d.kw, d.sw, d.pw, false);
    const T* xp = x + nc * d.H * d.W;
    C m = C(-INFINITY);
    int64_t mi = wh.start * d.W + ww.start;
    for (int64_t ih = wh.start; ih < wh.end; ++ih)
      for (int64_t iw = ww.start; iw < ww.end; ++iw) {
        const C v = Num<T>::to(xp[ih * d.W + iw]);
        if ((v > m) || (v != v)) { m = v; mi = ih * d.W + iw; }
      }
    y[o] = Num<T>::from(m);
    if (idx) idx[o] = mi;
  }
}

template <class T>
__global__ void max_pool_backward_kernel(const T* dy, const int64_t* idx, T* dx, PoolDims d, int64_t n) {
  using C = typename Num<T>::C;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t iw = e % d.W, t = e / d.W, ih = t % d.H, nc = t / d.H;
    int64_t oh0, oh1, ow0, ow1;
    out_range(ih, d.H, d.P, d.kh, d.sh, d.ph, false, oh0, oh1);
    out_range(iw, d.W, d.Q, d.kw, d.sw, d.pw, false, ow0, ow1);
    const int64_t me = ih * d.W + iw, base = nc * d.P * d.Q;
    C acc = C(0);
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t j = base + oh * d.Q + ow;
        if (idx[j] == me) acc += Num<T>::to(dy[j]);
      }
    dx[e] = Num<T>::from(acc);
  }
}

template <class T> __global__ void avg_pool_forward_kernel(const T* x, T* y, PoolDims d, int64_t n) {
  using C = typename Num<T>::C;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ow = o % d.Q, t = o / d.Q, oh = t % d.P, nc = t / d.P;
    const Win wh = window(oh, d.H, d.P, d.kh, d.sh, d.ph, d.adaptive);
    const Win ww = window(ow, d.W, d.Q, d.kw, d.sw, d.pw, d.adaptive);
    const T* xp = x + nc * d.H * d.W;
    double s = 0.0;
    for (int64_t ih = wh.start; ih < wh.end; ++ih)
      for (int64_t iw = ww.start; iw < ww.end; ++iw) s += double(Num<T>::to(xp[ih * d.W + iw]));
    y[o] = Num<T>::from(C(s / double(wh.extent * ww.extent)));
  }
}

template <class T> __global__ void avg_pool_backward_kernel(const T* dy, T* dx, PoolDims d, int64_t n) {
  using C = typename Num<T>::C;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t iw = e % d.W, t = e / d.W, ih = t % d.H, nc = t / d.H;
    int64_t oh0, oh1, ow0, ow1;
    out_range(ih, d.H, d.P, d.kh, d.sh, d.ph, d.adaptive, oh0, oh1);
    out_range(iw, d.W, d.Q, d.kw, d.sw, d.pw, d.adaptive, ow0, ow1);
    const T* g = dy + nc * d.P * d.Q;
    C acc = C(0);
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const Win wh = window(oh, d.H, d.P, d.kh, d.sh, d.ph, d.adaptive);
      if (ih < wh.start || ih >= wh.end) continue;
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const Win ww = window(ow, d.W, d.Q, d.kw, d.sw, d.pw, d.adaptive);
        if (iw < ww.start || iw >= ww.end) continue;
        acc += C(double(Num<T>::to(g[oh * d.Q + ow])) / double(wh.extent * ww.extent));
      }
    }
    dx[e] = Num<T>::from(acc);
  }
}

template <class T> void max_pool2d_forward_cuda(const Pool2dArgs& a) {
  const int64_t n = a.N * a.C * a.P * a.Q;
  if (n == 0) return;
  const int dev = cuda::device_of(a.y, "max_pool2d");
  cuda::DeviceGuard guard(dev);
  max_pool_forward_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), a.indices, pool_dims(a), n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void max_pool2d_backward_cuda(const Pool2dArgs& a) {
  const int64_t n = a.N * a.C * a.H * a.W;
  if (n == 0) return;
  OOMLAB_ASSERT(a.indices != nullptr && !a.adaptive);
  const int dev = cuda::device_of(a.dx, "max_pool2d_backward");
  cuda::DeviceGuard guard(dev);
  max_pool_backward_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<const T*>(a.dy), a.indices, static_cast<T*>(a.dx), pool_dims(a), n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void avg_pool2d_forward_cuda(const Pool2dArgs& a) {
  const int64_t n = a.N * a.C * a.P * a.Q;
  if (n == 0) return;
  const int dev = cuda::device_of(a.y, "avg_pool2d");
  cuda::DeviceGuard guard(dev);
  avg_pool_forward_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), pool_dims(a), n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void avg_pool2d_backward_cuda(const Pool2dArgs& a) {
  const int64_t n = a.N * a.C * a.H * a.W;
  if (n == 0) return;
  const int dev = cuda::device_of(a.dx, "avg_pool2d_backward");
  cuda::DeviceGuard guard(dev);
  avg_pool_backward_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<const T*>(a.dy), static_cast<T*>(a.dx), pool_dims(a), n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void set_pool(DType t) {
  max_pool2d_forward_kernels().set(DeviceType::cuda, t, &max_pool2d_forward_cuda<T>);
  max_pool2d_backward_kernels().set(DeviceType::cuda, t, &max_pool2d_backward_cuda<T>);
  avg_pool2d_forward_kernels().set(DeviceType::cuda, t, &avg_pool2d_forward_cuda<T>);
  avg_pool2d_backward_kernels().set(DeviceType::cuda, t, &avg_pool2d_backward_cuda<T>);
}
}  // namespace

void register_batchnorm_pool_cuda_kernels() {
  batch_norm_forward_kernels().set(DeviceType::cuda, DType::f32, &batch_norm_forward_cuda<float>);
  batch_norm_forward_kernels().set(DeviceType::cuda, DType::f64, &batch_norm_forward_cuda<double>);
  batch_norm_backward_kernels().set(DeviceType::cuda, DType::f32, &batch_norm_backward_cuda<float>);
  batch_norm_backward_kernels().set(DeviceType::cuda, DType::f64, &batch_norm_backward_cuda<double>);
  set_pool<float>(DType::f32);
  set_pool<double>(DType::f64);
  set_pool<__half>(DType::f16);
  set_pool<__nv_bfloat16>(DType::bf16);
}

}  // namespace oomlab
