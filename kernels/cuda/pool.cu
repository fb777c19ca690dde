// pool.cu — CUDA max/avg/adaptive-avg pool2d forward/backward (float32, float64, float16,
// bfloat16) with the semantics of kernels/cpu/pool_cpu.cpp (batch norm: batchnorm.cu).
// Max takes the first maximum in row-major window order (NaN propagates; the last NaN
// wins, as the CPU kernel's compare), indices flat h*W+w. Avg sums in double and divides by
// the padded extent (count_include_pad); adaptive bins [floor(i*H/P), ceil((i+1)*H/P)).
// channels_last (NHWC) buffers: the same per-element arithmetic, indexed through locate().
// Backward kernels gather per input element over the outputs whose window holds it, in
// row-major output order — the order in which the CPU kernels scatter — so dx is
// overwritten without atomics and float/double results match the CPU.
#include <cmath>

#include "kernels/pool.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/dense_common.cuh"

namespace oomlab {
namespace {
using cuda::dense::kBlock;
using cuda::dense::Num;
namespace dense = cuda::dense;

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

struct PoolDims { int64_t C, H, W, P, Q, kh, kw, sh, sw, ph, pw; bool adaptive, nhwc; };

PoolDims pool_dims(const Pool2dArgs& a) {
  return {a.C, a.H, a.W, a.P, a.Q, a.p.kernel_h, a.p.kernel_w, a.p.stride_h, a.p.stride_w, a.p.pad_h, a.p.pad_w,
          a.adaptive, a.channels_last};
}

// A channel's plane inside an NCHW or NHWC buffer: element (h, w) of a plane with `width`
// columns sits at base + (h * width + w) * step.
struct Plane { int64_t base, step; };

// Element i of a buffer of [N, C, rows, cols] (in d's layout) -> its (r, col) and the plane
// of the same (n, c) in a buffer of [N, C, prows, pcols] (the other side of the pool).
__device__ __forceinline__ Plane locate(int64_t i, const PoolDims& d, int64_t rows, int64_t cols, int64_t prows,
                                        int64_t pcols, int64_t& r, int64_t& col) {
  if (!d.nhwc) {
    col = i % cols;
    const int64_t t = i / cols;
    r = t % rows;
    return {(t / rows) * prows * pcols, 1};
  }
  const int64_t c = i % d.C;
  int64_t t = i / d.C;
  col = t % cols;
  t /= cols;
  r = t % rows;
  return {(t / rows) * prows * pcols * d.C + c, d.C};
}

template <class T> __global__ void max_pool_forward_kernel(const T* x, T* y, int64_t* idx, PoolDims d, int64_t n) {
  using C = typename Num<T>::C;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t oh, ow;
    const Plane xp = locate(o, d, d.P, d.Q, d.H, d.W, oh, ow);
    const Win wh = window(oh, d.H, d.P, d.kh, d.sh, d.ph, false);
    const Win ww = window(ow, d.W, d.Q, d.kw, d.sw, d.pw, false);
    C m = C(-INFINITY);
    int64_t mi = wh.start * d.W + ww.start;
    for (int64_t ih = wh.start; ih < wh.end; ++ih)
      for (int64_t iw = ww.start; iw < ww.end; ++iw) {
        const C v = Num<T>::to(x[xp.base + (ih * d.W + iw) * xp.step]);
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
    int64_t ih, iw;
    const Plane yp = locate(e, d, d.H, d.W, d.P, d.Q, ih, iw);
    int64_t oh0, oh1, ow0, ow1;
    out_range(ih, d.H, d.P, d.kh, d.sh, d.ph, false, oh0, oh1);
    out_range(iw, d.W, d.Q, d.kw, d.sw, d.pw, false, ow0, ow1);
    const int64_t me = ih * d.W + iw;
    C acc = C(0);
    for (int64_t oh = oh0; oh <= oh1; ++oh)
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const int64_t j = yp.base + (oh * d.Q + ow) * yp.step;
        if (idx[j] == me) acc += Num<T>::to(dy[j]);
      }
    dx[e] = Num<T>::from(acc);
  }
}

template <class T> __global__ void avg_pool_forward_kernel(const T* x, T* y, PoolDims d, int64_t n) {
  using C = typename Num<T>::C;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < n; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t oh, ow;
    const Plane xp = locate(o, d, d.P, d.Q, d.H, d.W, oh, ow);
    const Win wh = window(oh, d.H, d.P, d.kh, d.sh, d.ph, d.adaptive);
    const Win ww = window(ow, d.W, d.Q, d.kw, d.sw, d.pw, d.adaptive);
    double s = 0.0;
    for (int64_t ih = wh.start; ih < wh.end; ++ih)
      for (int64_t iw = ww.start; iw < ww.end; ++iw)
        s += double(Num<T>::to(x[xp.base + (ih * d.W + iw) * xp.step]));
    y[o] = Num<T>::from(C(s / double(wh.extent * ww.extent)));
  }
}

template <class T> __global__ void avg_pool_backward_kernel(const T* dy, T* dx, PoolDims d, int64_t n) {
  using C = typename Num<T>::C;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    int64_t ih, iw;
    const Plane gp = locate(e, d, d.H, d.W, d.P, d.Q, ih, iw);
    int64_t oh0, oh1, ow0, ow1;
    out_range(ih, d.H, d.P, d.kh, d.sh, d.ph, d.adaptive, oh0, oh1);
    out_range(iw, d.W, d.Q, d.kw, d.sw, d.pw, d.adaptive, ow0, ow1);
    C acc = C(0);
    for (int64_t oh = oh0; oh <= oh1; ++oh) {
      const Win wh = window(oh, d.H, d.P, d.kh, d.sh, d.ph, d.adaptive);
      if (ih < wh.start || ih >= wh.end) continue;
      for (int64_t ow = ow0; ow <= ow1; ++ow) {
        const Win ww = window(ow, d.W, d.Q, d.kw, d.sw, d.pw, d.adaptive);
        if (iw < ww.start || iw >= ww.end) continue;
        acc += C(double(Num<T>::to(dy[gp.base + (oh * d.Q + ow) * gp.step])) / double(wh.extent * ww.extent));
      }
    }
    dx[e] = Num<T>::from(acc);
  }
}

template <class T> void max_pool2d_forward_cuda(const Pool2dArgs& a) {
  const int64_t n = a.N * a.C * a.P * a.Q;
  if (n == 0) return;
  const int dev = cuda::kernel_device("max_pool2d");
  cuda::DeviceGuard guard(dev);
  max_pool_forward_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), a.indices, pool_dims(a), n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void max_pool2d_backward_cuda(const Pool2dArgs& a) {
  const int64_t n = a.N * a.C * a.H * a.W;
  if (n == 0) return;
  OOMLAB_ASSERT(a.indices != nullptr && !a.adaptive);
  const int dev = cuda::kernel_device("max_pool2d_backward");
  cuda::DeviceGuard guard(dev);
  max_pool_backward_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<const T*>(a.dy), a.indices, static_cast<T*>(a.dx), pool_dims(a), n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void avg_pool2d_forward_cuda(const Pool2dArgs& a) {
  const int64_t n = a.N * a.C * a.P * a.Q;
  if (n == 0) return;
  const int dev = cuda::kernel_device("avg_pool2d");
  cuda::DeviceGuard guard(dev);
  avg_pool_forward_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), pool_dims(a), n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void avg_pool2d_backward_cuda(const Pool2dArgs& a) {
  const int64_t n = a.N * a.C * a.H * a.W;
  if (n == 0) return;
  const int dev = cuda::kernel_device("avg_pool2d_backward");
  cuda::DeviceGuard guard(dev);
  avg_pool_backward_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<const T*>(a.dy), static_cast<T*>(a.dx), pool_dims(a), n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void set_pool(DType t) {
  set_kernel<&max_pool2d_forward_cuda<T>>(max_pool2d_forward_kernels(), DeviceType::cuda, t);
  set_kernel<&max_pool2d_backward_cuda<T>>(max_pool2d_backward_kernels(), DeviceType::cuda, t);
  set_kernel<&avg_pool2d_forward_cuda<T>>(avg_pool2d_forward_kernels(), DeviceType::cuda, t);
  set_kernel<&avg_pool2d_backward_cuda<T>>(avg_pool2d_backward_kernels(), DeviceType::cuda, t);
}
}  // namespace

void register_pool_cuda_kernels() {
  set_pool<float>(DType::f32);
  set_pool<double>(DType::f64);
  set_pool<__half>(DType::f16);
  set_pool<__nv_bfloat16>(DType::bf16);
}

}  // namespace oomlab
