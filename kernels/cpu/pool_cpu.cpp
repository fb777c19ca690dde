// pool_cpu.cpp — CPU kernels for max_pool2d / avg_pool2d / adaptive_avg_pool2d, forward
// and backward (float32, float64). OpenMP over the N*C planes (static schedule); within a
// plane everything runs in a fixed order, so results do not depend on the thread count.
// Max: first maximum wins ties, NaN propagates (as PyTorch); indices are flat h*W+w in the
// plane (may be null when backward is not needed). Avg sums in double; divisor counts
// padding (count_include_pad); adaptive bins are [floor(i*H/P), ceil((i+1)*H/P)).
// Backward kernels overwrite dx (zero, then scatter-add per plane). channels_last (NHWC)
// buffers take the *_nhwc kernels, bit-identical to the NCHW ones.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/pool.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {
// Window [start, end) along one axis and the avg divisor contribution (padded extent).
struct Window { int64_t start, end, extent; };

inline Window window(int64_t o, int64_t in, int64_t out, int64_t k, int64_t s, int64_t pad, bool adaptive) {
  if (adaptive) {
    int64_t st = (o * in) / out, en = ((o + 1) * in + out - 1) / out;
    return {st, en, en - st};
  }
  int64_t st = o * s - pad, en = std::min(st + k, in + pad);
  int64_t extent = en - st;
  return {std::max<int64_t>(st, 0), std::min(en, in), extent};
}

std::vector<Window> windows(int64_t in, int64_t out, int64_t k, int64_t s, int64_t pad, bool adaptive) {
  std::vector<Window> v(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) v[size_t(o)] = window(o, in, out, k, s, pad, adaptive);
  return v;
}

// One output row of max pooling. Vectorised over ow: for each window element (ih, kw) in
// row-major order, every output whose window holds it compares in turn, so each output
// sees its candidates in the same order as a naive per-window loop (first max wins).
template <class T, bool kIdx>
inline void max_pool_row(const T* xp, T* m, int64_t* mi, int64_t W, int64_t Q, const Window& h,
                         const Window* ww, int64_t kw_size, int64_t sw, int64_t pw) {
  for (int64_t ow = 0; ow < Q; ++ow) {
    m[ow] = -std::numeric_limits<T>::infinity();
    if constexpr (kIdx) mi[ow] = h.start * W + ww[ow].start;
  }
  for (int64_t ih = h.start; ih < h.end; ++ih) {
    const T* row = xp + ih * W;
    for (int64_t kw = 0; kw < kw_size; ++kw) {
      // outputs ow whose input column iw = ow*sw - pw + kw lies in [0, W)
      const int64_t lo = std::max<int64_t>(0, (pw - kw + sw - 1) / sw);
      const int64_t last = W - 1 + pw - kw;   // may be negative: no output reaches it
      const int64_t hi = last < 0 ? 0 : std::min<int64_t>(Q, last / sw + 1);
      const T* base = row - pw + kw;
      if constexpr (kIdx) {
        const int64_t ibase = ih * W - pw + kw;
#pragma omp simd
        for (int64_t ow = lo; ow < hi; ++ow) {
          const T v = base[ow * sw];
          const bool take = (v > m[ow]) | (v != v);
          m[ow] = take ? v : m[ow];
          mi[ow] = take ? ibase + ow * sw : mi[ow];
        }
      } else {
#pragma omp simd
        for (int64_t ow = lo; ow < hi; ++ow) {
          const T v = base[ow * sw];
          m[ow] = ((v > m[ow]) | (v != v)) ? v : m[ow];
        }
      }
    }
  }
}

// ---- channels_last (NHWC) ---------------------------------------------------------------
// The same arithmetic as the NCHW kernels above, element for element and in the same order
// (window rows then columns; backward scatters in output order), with the C channels of a
// pixel in the innermost loop: results are bit-identical to NCHW's.
template <class T> void max_pool2d_forward_nhwc(const Pool2dArgs& a) {
  const int64_t C = a.C, H = a.H, W = a.W, P = a.P, Q = a.Q;
  const auto wh = windows(H, P, a.p.kernel_h, a.p.stride_h, a.p.pad_h, false);
  const auto ww = windows(W, Q, a.p.kernel_w, a.p.stride_w, a.p.pad_w, false);
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
#pragma omp parallel for schedule(static)
  for (int64_t np = 0; np < a.N * P; ++np) {
    const int64_t n = np / P, oh = np % P;
    const Window& h = wh[size_t(oh)];
    for (int64_t ow = 0; ow < Q; ++ow) {
      const Window& w = ww[size_t(ow)];
      T* m = y + (np * Q + ow) * C;
      int64_t* mi = a.indices ? a.indices + (np * Q + ow) * C : nullptr;
      for (int64_t c = 0; c < C; ++c) m[c] = -std::numeric_limits<T>::infinity();
      if (mi) std::fill(mi, mi + C, h.start * W + w.start);
      for (int64_t ih = h.start; ih < h.end; ++ih)
        for (int64_t iw = w.start; iw < w.end; ++iw) {
          const T* px = x + ((n * H + ih) * W + iw) * C;
          for (int64_t c = 0; c < C; ++c) {
            const T v = px[c];
            const bool take = (v > m[c]) | (v != v);
            m[c] = take ? v : m[c];
            if (mi && take) mi[c] = ih * W + iw;
          }
        }
    }
  }
}

template <class T> void max_pool2d_backward_nhwc(const Pool2dArgs& a) {
  const int64_t C = a.C, HW = a.H * a.W, PQ = a.P * a.Q;
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < a.N; ++n) {
    T* dxp = dx + n * HW * C;
    std::fill(dxp, dxp + HW * C, T(0));
    for (int64_t j = 0; j < PQ; ++j) {
      const T* g = dy + (n * PQ + j) * C;
      const int64_t* ip = a.indices + (n * PQ + j) * C;
      for (int64_t c = 0; c < C; ++c) dxp[ip[c] * C + c] += g[c];
    }
  }
}

template <class T> void avg_pool2d_forward_nhwc(const Pool2dArgs& a) {
  const int64_t C = a.C, H = a.H, W = a.W, P = a.P, Q = a.Q;
  const auto wh = windows(H, P, a.p.kernel_h, a.p.stride_h, a.p.pad_h, a.adaptive);
  const auto ww = windows(W, Q, a.p.kernel_w, a.p.stride_w, a.p.pad_w, a.adaptive);
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
#pragma omp parallel for schedule(static)
  for (int64_t np = 0; np < a.N * P; ++np) {
    const int64_t n = np / P, oh = np % P;
    const Window& h = wh[size_t(oh)];
    std::vector<double> s(size_t(C), 0.0);
    for (int64_t ow = 0; ow < Q; ++ow) {
      const Window& w = ww[size_t(ow)];
      std::fill(s.begin(), s.end(), 0.0);
      for (int64_t ih = h.start; ih < h.end; ++ih)
        for (int64_t iw = w.start; iw < w.end; ++iw) {
          const T* px = x + ((n * H + ih) * W + iw) * C;
          for (int64_t c = 0; c < C; ++c) s[size_t(c)] += double(px[c]);
        }
      T* py = y + (np * Q + ow) * C;
      const double div = double(h.extent * w.extent);
      for (int64_t c = 0; c < C; ++c) py[c] = T(s[size_t(c)] / div);
    }
  }
}

template <class T> void avg_pool2d_backward_nhwc(const Pool2dArgs& a) {
  const int64_t C = a.C, H = a.H, W = a.W, P = a.P, Q = a.Q;
  const auto wh = windows(H, P, a.p.kernel_h, a.p.stride_h, a.p.pad_h, a.adaptive);
  const auto ww = windows(W, Q, a.p.kernel_w, a.p.stride_w, a.p.pad_w, a.adaptive);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < a.N; ++n) {
    T* dxp = dx + n * H * W * C;
    std::fill(dxp, dxp + H * W * C, T(0));
    std::vector<T> v(static_cast<size_t>(C));
    for (int64_t oh = 0; oh < P; ++oh) {
      const Window& h = wh[size_t(oh)];
      for (int64_t ow = 0; ow < Q; ++ow) {
        const Window& w = ww[size_t(ow)];
        const T* g = dy + ((n * P + oh) * Q + ow) * C;
        for (int64_t c = 0; c < C; ++c) v[size_t(c)] = T(double(g[c]) / double(h.extent * w.extent));
        for (int64_t ih = h.start; ih < h.end; ++ih)
          for (int64_t iw = w.start; iw < w.end; ++iw) {
            T* px = dxp + (ih * W + iw) * C;
            for (int64_t c = 0; c < C; ++c) px[c] += v[size_t(c)];
          }
      }
    }
  }
}

template <class T> void max_pool2d_forward_cpu(const Pool2dArgs& a) {
  if (a.channels_last) return max_pool2d_forward_nhwc<T>(a);
  const int64_t H = a.H, W = a.W, P = a.P, Q = a.Q;
  const auto wh = windows(H, P, a.p.kernel_h, a.p.stride_h, a.p.pad_h, false);
  const auto ww = windows(W, Q, a.p.kernel_w, a.p.stride_w, a.p.pad_w, false);
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < a.N * a.C; ++nc) {
    const T* xp = x + nc * H * W;
    for (int64_t oh = 0; oh < P; ++oh) {
      T* m = y + (nc * P + oh) * Q;
      if (a.indices)
        max_pool_row<T, true>(xp, m, a.indices + (nc * P + oh) * Q, W, Q, wh[size_t(oh)], ww.data(),
                              a.p.kernel_w, a.p.stride_w, a.p.pad_w);
      else
        max_pool_row<T, false>(xp, m, nullptr, W, Q, wh[size_t(oh)], ww.data(), a.p.kernel_w,
                               a.p.stride_w, a.p.pad_w);
    }
  }
}

template <class T> void max_pool2d_backward_cpu(const Pool2dArgs& a) {
  if (a.channels_last) return max_pool2d_backward_nhwc<T>(a);
  const int64_t HW = a.H * a.W, PQ = a.P * a.Q;
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < a.N * a.C; ++nc) {
    T* dxp = dx + nc * HW;
    const T* g = dy + nc * PQ;
    const int64_t* ip = a.indices + nc * PQ;
    std::fill(dxp, dxp + HW, T(0));
    for (int64_t j = 0; j < PQ; ++j) dxp[ip[j]] += g[j];
  }
}

template <class T> void avg_pool2d_forward_cpu(const Pool2dArgs& a) {
  if (a.channels_last) return avg_pool2d_forward_nhwc<T>(a);
  const int64_t H = a.H, W = a.W, P = a.P, Q = a.Q;
  const auto wh = windows(H, P, a.p.kernel_h, a.p.stride_h, a.p.pad_h, a.adaptive);
  const auto ww = windows(W, Q, a.p.kernel_w, a.p.stride_w, a.p.pad_w, a.adaptive);
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < a.N * a.C; ++nc) {
    const T* xp = x + nc * H * W;
    T* yp = y + nc * P * Q;
    for (int64_t oh = 0; oh < P; ++oh) {
      const Window& h = wh[size_t(oh)];
      for (int64_t ow = 0; ow < Q; ++ow) {
        const Window& w = ww[size_t(ow)];
        double s = 0.0;
        for (int64_t ih = h.start; ih < h.end; ++ih)
          for (int64_t iw = w.start; iw < w.end; ++iw) s += double(xp[ih * W + iw]);
        yp[oh * Q + ow] = T(s / double(h.extent * w.extent));
      }
    }
  }
}

template <class T> void avg_pool2d_backward_cpu(const Pool2dArgs& a) {
  if (a.channels_last) return avg_pool2d_backward_nhwc<T>(a);
  const int64_t H = a.H, W = a.W, P = a.P, Q = a.Q;
  const auto wh = windows(H, P, a.p.kernel_h, a.p.stride_h, a.p.pad_h, a.adaptive);
  const auto ww = windows(W, Q, a.p.kernel_w, a.p.stride_w, a.p.pad_w, a.adaptive);
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < a.N * a.C; ++nc) {
    T* dxp = dx + nc * H * W;
    const T* g = dy + nc * P * Q;
    std::fill(dxp, dxp + H * W, T(0));
    for (int64_t oh = 0; oh < P; ++oh) {
      const Window& h = wh[size_t(oh)];
      for (int64_t ow = 0; ow < Q; ++ow) {
        const Window& w = ww[size_t(ow)];
        const T v = T(double(g[oh * Q + ow]) / double(h.extent * w.extent));
        for (int64_t ih = h.start; ih < h.end; ++ih)
          for (int64_t iw = w.start; iw < w.end; ++iw) dxp[ih * W + iw] += v;
      }
    }
  }
}
// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
template <DType H, KernelTable<Pool2dArgs>& (*Table)(), bool Backward> void pool_half(const Pool2dArgs& a) {
  Widen<H> w;
  Pool2dArgs f = a;
  const int64_t xn = a.N * a.C * a.H * a.W, yn = a.N * a.C * a.P * a.Q;
  if (!Backward) { f.x = w.in(a.x, xn); f.y = w.out(a.y, yn); }
  else { f.x = w.in(a.x, xn); f.dy = w.in(a.dy, yn); f.dx = w.out(a.dx, xn); }
  run_f32(Table(), f);
  w.narrow();
}

template <DType H> void register_pool_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&pool_half<H, max_pool2d_forward_kernels, false>>(max_pool2d_forward_kernels(), cpu, H);
  set_kernel<&pool_half<H, max_pool2d_backward_kernels, true>>(max_pool2d_backward_kernels(), cpu, H);
  set_kernel<&pool_half<H, avg_pool2d_forward_kernels, false>>(avg_pool2d_forward_kernels(), cpu, H);
  set_kernel<&pool_half<H, avg_pool2d_backward_kernels, true>>(avg_pool2d_backward_kernels(), cpu, H);
}
}  // namespace

void register_pool_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(max_pool2d_forward_kernels(), max_pool2d_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(max_pool2d_backward_kernels(), max_pool2d_backward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(avg_pool2d_forward_kernels(), avg_pool2d_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(avg_pool2d_backward_kernels(), avg_pool2d_backward_cpu);
  register_pool_half<DType::f16>();
  register_pool_half<DType::bf16>();
}

}  // namespace oomlab
