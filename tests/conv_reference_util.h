// conv_reference_util.h — what the CPU conv2d kernel tests share: deterministic inputs, NaN-filled
// outputs run through the kernel tables (forward, backward data, backward weight), and a naive
// float64 reference for NCHW, groups 1, any stride, padding and dilation, with each output's
// sum of |terms| so that a tolerance scales with the products it sums.
// Contract: a Conv2dArgs' P and Q are set (conv_ref_args); the reference reads the buffers' x, w
// and dy, whatever the dtype.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/ops/conv.h"   // conv2d_output_shape
#include "kernels/conv.h"

namespace oomlab::testing {

struct ConvGeometry { int64_t N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw; };

inline Conv2dArgs conv_ref_args(const ConvGeometry& c) {
  Conv2dArgs a{};
  a.N = c.N; a.C = c.C; a.H = c.H; a.W = c.W; a.K = c.K; a.R = c.R; a.S = c.S;
  a.p.stride_h = c.sh; a.p.stride_w = c.sw; a.p.pad_h = c.ph; a.p.pad_w = c.pw; a.p.dil_h = c.dh; a.p.dil_w = c.dw;
  Shape y = conv2d_output_shape({c.N, c.C, c.H, c.W}, {c.K, c.C, c.R, c.S}, a.p);
  a.P = y[2]; a.Q = y[3];
  return a;
}

template <class T> std::vector<T> conv_ref_values(size_t n, uint64_t seed) {   // deterministic, in [-1, 1)
  std::vector<T> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (T& x : v) {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    x = T(double(s >> 11) / double(1ull << 53) * 2.0 - 1.0);
  }
  return v;
}

template <class T> constexpr DType conv_ref_dtype() { return sizeof(T) == 4 ? DType::f32 : DType::f64; }

template <class T> struct ConvBuffers {
  std::vector<T> x, w, dy, y, dx, dw;
  ConvBuffers(const Conv2dArgs& a, uint64_t seed)
      : x(conv_ref_values<T>(size_t(a.N * a.C * a.H * a.W), seed)),
        w(conv_ref_values<T>(size_t(a.K * a.C * a.R * a.S), seed + 1)),
        dy(conv_ref_values<T>(size_t(a.N * a.K * a.P * a.Q), seed + 2)), y(dy.size(), NAN), dx(x.size(), NAN),
        dw(w.size(), NAN) {}
  void run(Conv2dArgs a) {   // NaN-filled outputs: every element must be overwritten
    a.x = x.data(); a.w = w.data(); a.y = y.data(); a.dy = dy.data(); a.dx = dx.data(); a.dw = dw.data();
    conv2d_forward_kernels().launch(cpu_device(), conv_ref_dtype<T>(), a);
    conv2d_backward_data_kernels().launch(cpu_device(), conv_ref_dtype<T>(), a);
    conv2d_backward_weight_kernels().launch(cpu_device(), conv_ref_dtype<T>(), a);
  }
};

struct ConvReference {   // the three results and each element's sum of |terms|
  std::vector<double> y, ym, dx, dxm, dw, dwm;
};

template <class T> ConvReference conv_reference(const Conv2dArgs& a, const ConvBuffers<T>& b) {
  ConvReference r{std::vector<double>(b.y.size()), std::vector<double>(b.y.size()), std::vector<double>(b.dx.size()),
                  std::vector<double>(b.dx.size()), std::vector<double>(b.dw.size()), std::vector<double>(b.dw.size())};
  const auto& p = a.p;
  for (int64_t n = 0; n < a.N; ++n)
    for (int64_t k = 0; k < a.K; ++k)
      for (int64_t oh = 0; oh < a.P; ++oh)
        for (int64_t ow = 0; ow < a.Q; ++ow)
          for (int64_t ci = 0; ci < a.C; ++ci)
            for (int64_t t = 0; t < a.R * a.S; ++t) {
              const int64_t h = oh * p.stride_h - p.pad_h + t / a.S * p.dil_h;
              const int64_t w = ow * p.stride_w - p.pad_w + t % a.S * p.dil_w;
              if (h < 0 || h >= a.H || w < 0 || w >= a.W) continue;
              const size_t yi = size_t(((n * a.K + k) * a.P + oh) * a.Q + ow);
              const size_t xi = size_t(((n * a.C + ci) * a.H + h) * a.W + w);
              const size_t wi = size_t((k * a.C + ci) * a.R * a.S + t);
              const double xv = b.x[xi], wv = b.w[wi], gv = b.dy[yi];
              r.y[yi] += xv * wv; r.ym[yi] += std::fabs(xv * wv);
              r.dx[xi] += gv * wv; r.dxm[xi] += std::fabs(gv * wv);
              r.dw[wi] += gv * xv; r.dwm[wi] += std::fabs(gv * xv);
            }
  return r;
}

// |got - ref| <= rtol * sum|terms| + floor per element.
template <class T>
void expect_conv_close(const std::vector<T>& got, const std::vector<double>& ref, const std::vector<double>& mag,
                       double rtol, double floor, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double(got[i]) - ref[i]), rtol * mag[i] + floor)
        << what << " element " << i << ": " << got[i] << " vs " << ref[i];
}

// The kernels' three results in `b` against the reference, `name` in each failure.
template <class T>
void expect_matches_reference(const Conv2dArgs& a, const ConvBuffers<T>& b, double rtol, double floor,
                              const std::string& name) {
  const ConvReference r = conv_reference(a, b);
  expect_conv_close(b.y, r.y, r.ym, rtol, floor, name + " forward");
  expect_conv_close(b.dx, r.dx, r.dxm, rtol, floor, name + " backward data");
  expect_conv_close(b.dw, r.dw, r.dwm, rtol, floor, name + " backward weight");
}

}  // namespace oomlab::testing
