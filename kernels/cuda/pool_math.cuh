// pool_math.cuh — the per-element bodies of pool.cu's kernels (max / avg / adaptive-avg
// pool2d forward and backward, NCHW or channels_last through locate()), __host__ __device__
// so that kernels/cuda/check/pool_check.cu runs the very same code on the host for every
// element and holds it against the CPU kernels bit for bit (float32, float64). IO<T>
// converts storage to compute type (to / from), as dense_common.cuh's Num.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/pool.h"

namespace oomlab::pool_math {

struct Win { int64_t start, end, extent; };   // [start, end) clipped; extent = padded size

__host__ __device__ inline Win window(int64_t o, int64_t in, int64_t out, int64_t k, int64_t s, int64_t pad,
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
__host__ __device__ inline void out_range(int64_t i, int64_t in, int64_t out, int64_t k, int64_t s, int64_t pad,
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

inline PoolDims pool_dims(const Pool2dArgs& a) {
  return {a.C, a.H, a.W, a.P, a.Q, a.p.kernel_h, a.p.kernel_w, a.p.stride_h, a.p.stride_w, a.p.pad_h, a.p.pad_w,
          a.adaptive, a.channels_last};
}

// A channel's plane inside an NCHW or NHWC buffer: element (h, w) of a plane with `width`
// columns sits at base + (h * width + w) * step.
struct Plane { int64_t base, step; };

// Element i of a buffer of [N, C, rows, cols] (in d's layout) -> its (r, col) and the plane
// of the same (n, c) in a buffer of [N, C, prows, pcols] (the other side of the pool).
__host__ __device__ inline Plane locate(int64_t i, const PoolDims& d, int64_t rows, int64_t cols, int64_t prows,
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

// Output element o of max pooling (and its index).
template <class IO, class T>
__host__ __device__ void max_forward_at(int64_t o, const T* x, T* y, int64_t* idx, const PoolDims& d) {
  using C = typename IO::C;
  int64_t oh, ow;
  const Plane xp = locate(o, d, d.P, d.Q, d.H, d.W, oh, ow);
  const Win wh = window(oh, d.H, d.P, d.kh, d.sh, d.ph, false);
  const Win ww = window(ow, d.W, d.Q, d.kw, d.sw, d.pw, false);
  C m = C(-INFINITY);
  int64_t mi = wh.start * d.W + ww.start;
  for (int64_t ih = wh.start; ih < wh.end; ++ih)
    for (int64_t iw = ww.start; iw < ww.end; ++iw) {
      const C v = IO::to(x[xp.base + (ih * d.W + iw) * xp.step]);
      if ((v > m) || (v != v)) { m = v; mi = ih * d.W + iw; }
    }
  y[o] = IO::from(m);
  if (idx) idx[o] = mi;
}

// Input element e's gradient of max pooling: the outputs whose window holds e and chose it.
template <class IO, class T>
__host__ __device__ void max_backward_at(int64_t e, const T* dy, const int64_t* idx, T* dx, const PoolDims& d) {
  using C = typename IO::C;
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
      if (idx[j] == me) acc += IO::to(dy[j]);
    }
  dx[e] = IO::from(acc);
}

// Output element o of average pooling.
template <class IO, class T> __host__ __device__ void avg_forward_at(int64_t o, const T* x, T* y, const PoolDims& d) {
  using C = typename IO::C;
  int64_t oh, ow;
  const Plane xp = locate(o, d, d.P, d.Q, d.H, d.W, oh, ow);
  const Win wh = window(oh, d.H, d.P, d.kh, d.sh, d.ph, d.adaptive);
  const Win ww = window(ow, d.W, d.Q, d.kw, d.sw, d.pw, d.adaptive);
  double s = 0.0;
  for (int64_t ih = wh.start; ih < wh.end; ++ih)
    for (int64_t iw = ww.start; iw < ww.end; ++iw)
      s += double(IO::to(x[xp.base + (ih * d.W + iw) * xp.step]));
  y[o] = IO::from(C(s / double(wh.extent * ww.extent)));
}

// Input element e's gradient of average pooling.
template <class IO, class T>
__host__ __device__ void avg_backward_at(int64_t e, const T* dy, T* dx, const PoolDims& d) {
  using C = typename IO::C;
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
      acc += C(double(IO::to(dy[gp.base + (oh * d.Q + ow) * gp.step])) / double(wh.extent * ww.extent));
    }
  }
  dx[e] = IO::from(acc);
}

}  // namespace oomlab::pool_math
