// upsample_cpu.cpp — CPU kernels of the upsample family (kernels/upsample.h; float,
// double): upsample2x nearest / bilinear, forward and backward.
// Determinism: every output element is computed by one thread in a fixed order; the
// upsample backward is a gather (each dx element sums its dy sources in output order, no
// atomics). OpenMP (static schedule) over (plane, row); small problems run on one thread.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/upsample.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {
constexpr int64_t kParallelMin = 32768;   // elements below which a kernel stays serial

// ---- upsample2x --------------------------------------------------------------------
// Bilinear taps per axis (input size n, output 2n): output d reads i0[d] with weight
// l0[d] and i1[d] with weight l1[d]; PyTorch's area_pixel_compute_source_index with
// scale 1/2: src = max(0, (d + 0.5) / 2 - 0.5), i0 = floor(src), i1 = min(i0 + 1, n - 1).
struct AxisMap {
  std::vector<int64_t> i0, i1;
  std::vector<double> l0, l1;
  // Gather lists: input i receives (d, weight) from every output d reading it, in
  // increasing d (i0 before i1 for the same d), as a forward-order scatter would add.
  std::vector<int64_t> start, src;
  std::vector<double> wt;
};

AxisMap make_axis(int64_t n) {
  AxisMap m;
  const int64_t out = 2 * n;
  m.i0.resize(size_t(out)); m.i1.resize(size_t(out)); m.l0.resize(size_t(out)); m.l1.resize(size_t(out));
  for (int64_t d = 0; d < out; ++d) {
    const double s = std::max(0.0, (double(d) + 0.5) * 0.5 - 0.5);
    const int64_t i = int64_t(s);
    m.i0[d] = i;
    m.i1[d] = i + (i < n - 1 ? 1 : 0);
    m.l1[d] = s - double(i);
    m.l0[d] = 1.0 - m.l1[d];
  }
  std::vector<int64_t> cnt(size_t(n), 0);
  for (int64_t d = 0; d < out; ++d) { ++cnt[size_t(m.i0[d])]; ++cnt[size_t(m.i1[d])]; }
  m.start.assign(size_t(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i) m.start[size_t(i) + 1] = m.start[size_t(i)] + cnt[size_t(i)];
  m.src.resize(size_t(m.start[size_t(n)]));
  m.wt.resize(m.src.size());
  std::vector<int64_t> pos(m.start.begin(), m.start.end() - 1);
  for (int64_t d = 0; d < out; ++d) {
    const size_t p0 = size_t(pos[size_t(m.i0[d])]++);
    m.src[p0] = d; m.wt[p0] = m.l0[d];
    const size_t p1 = size_t(pos[size_t(m.i1[d])]++);
    m.src[p1] = d; m.wt[p1] = m.l1[d];
  }
  return m;
}

template <class T> void upsample2x_nearest_forward(const Upsample2xArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int64_t H = a.H, W = a.W, W2 = 2 * W;
#pragma omp parallel for collapse(2) schedule(static) if (a.NC * H * W > kParallelMin)
  for (int64_t pl = 0; pl < a.NC; ++pl)
    for (int64_t h = 0; h < H; ++h) {
      const T* xr = x + (pl * H + h) * W;
      T* y0 = y + (pl * 2 * H + 2 * h) * W2;
      for (int64_t w = 0; w < W; ++w) y0[2 * w] = y0[2 * w + 1] = xr[w];
      std::copy(y0, y0 + W2, y0 + W2);
    }
}

// dx[h, w] = dy[2h, 2w] + dy[2h, 2w+1] + dy[2h+1, 2w] + dy[2h+1, 2w+1] (output order).
template <class T> void upsample2x_nearest_backward(const Upsample2xArgs& a) {
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
  const int64_t H = a.H, W = a.W, W2 = 2 * W;
#pragma omp parallel for collapse(2) schedule(static) if (a.NC * H * W > kParallelMin)
  for (int64_t pl = 0; pl < a.NC; ++pl)
    for (int64_t h = 0; h < H; ++h) {
      const T* g0 = dy + (pl * 2 * H + 2 * h) * W2;
      const T* g1 = g0 + W2;
      T* d = dx + (pl * H + h) * W;
      for (int64_t w = 0; w < W; ++w) d[w] = ((g0[2 * w] + g0[2 * w + 1]) + g1[2 * w]) + g1[2 * w + 1];
    }
}

// Horizontal pass: o[d] = l0[d] * r[i0[d]] + l1[d] * r[i1[d]], d in [0, 2W). Outputs
// 1..2W-2 follow the fixed 2x pattern of the tables (d = 2k+1: .75 r[k] + .25 r[k+1];
// d = 2k+2: .25 r[k] + .75 r[k+1]), the two edge outputs read the tables.
template <class T> void bilinear_row(const AxisMap& m, const T* r, int64_t W, T* o) {
  const T qa = T(0.25), qb = T(0.75);
  for (int64_t k = 0; k + 1 < W; ++k) {
    o[2 * k + 1] = qb * r[k] + qa * r[k + 1];
    o[2 * k + 2] = qa * r[k] + qb * r[k + 1];
  }
  for (int64_t d : {int64_t(0), 2 * W - 1}) o[d] = T(m.l0[d]) * r[m.i0[d]] + T(m.l1[d]) * r[m.i1[d]];
}

// Adjoint of bilinear_row: R[w] = sum over (d, l) reading w of l * g[d], in d order.
// Columns 2..W-2 follow the fixed pattern .25 g[2w-1] + .75 g[2w] + .75 g[2w+1] + .25 g[2w+2];
// columns 0, 1, W-1 (which also collect the clamped edge taps) read the gather lists.
template <class T> void bilinear_row_adjoint(const AxisMap& m, const T* g, int64_t W, T* R) {
  const T qa = T(0.25), qb = T(0.75);
  for (int64_t w = 2; w + 2 <= W; ++w)
    R[w] = ((qa * g[2 * w - 1] + qb * g[2 * w]) + qb * g[2 * w + 1]) + qa * g[2 * w + 2];
  auto gather = [&](int64_t w) {
    T s = T(0);
    for (int64_t f = m.start[w]; f < m.start[w + 1]; ++f) s += T(m.wt[f]) * g[m.src[f]];
    R[w] = s;
  };
  for (int64_t w = 0; w < std::min<int64_t>(W, 2); ++w) gather(w);
  if (W - 1 >= 2) gather(W - 1);
}

// y[oh, :] = l0h * row(x[h0]) + l1h * row(x[h1]), row() the horizontal pass.
template <class T> void upsample2x_bilinear_forward(const Upsample2xArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int64_t H = a.H, W = a.W, H2 = 2 * H, W2 = 2 * W;
  const AxisMap mh = make_axis(H), mw = make_axis(W);
#pragma omp parallel if (a.NC * H2 * W2 > kParallelMin)
  {
    std::vector<T> buf(static_cast<size_t>(2 * W2));   // the two interpolated source rows
    T* r0 = buf.data();
    T* r1 = r0 + W2;
#pragma omp for collapse(2) schedule(static)
    for (int64_t pl = 0; pl < a.NC; ++pl)
      for (int64_t oh = 0; oh < H2; ++oh) {
        bilinear_row(mw, x + (pl * H + mh.i0[oh]) * W, W, r0);
        bilinear_row(mw, x + (pl * H + mh.i1[oh]) * W, W, r1);
        const T lh0 = T(mh.l0[oh]), lh1 = T(mh.l1[oh]);
        T* yr = y + (pl * H2 + oh) * W2;
        for (int64_t ow = 0; ow < W2; ++ow) yr[ow] = lh0 * r0[ow] + lh1 * r1[ow];
      }
  }
}

// dx[h, :] = sum over the rows (oh, lh) reading h, in oh order, of lh * adjoint(dy[oh]):
// a gather, each dx row owned by one thread.
template <class T> void upsample2x_bilinear_backward(const Upsample2xArgs& a) {
  const T* dy = static_cast<const T*>(a.dy);
  T* dx = static_cast<T*>(a.dx);
  const int64_t H = a.H, W = a.W, W2 = 2 * W;
  const AxisMap mh = make_axis(H), mw = make_axis(W);
#pragma omp parallel if (a.NC * H * W > kParallelMin / 4)
  {
    std::vector<T> buf(static_cast<size_t>(W));
    T* R = buf.data();
#pragma omp for collapse(2) schedule(static)
    for (int64_t pl = 0; pl < a.NC; ++pl)
      for (int64_t h = 0; h < H; ++h) {
        T* d = dx + (pl * H + h) * W;
        for (int64_t e = mh.start[h]; e < mh.start[h + 1]; ++e) {
          bilinear_row_adjoint(mw, dy + (pl * 2 * H + mh.src[e]) * W2, W, R);
          const T lh = T(mh.wt[e]);
          if (e == mh.start[h])
            for (int64_t w = 0; w < W; ++w) d[w] = lh * R[w];
          else
            for (int64_t w = 0; w < W; ++w) d[w] += lh * R[w];
        }
      }
  }
}

template <class T> void upsample2x_forward_cpu(const Upsample2xArgs& a) {
  if (a.NC * a.H * a.W == 0) return;
  if (a.bilinear) upsample2x_bilinear_forward<T>(a);
  else upsample2x_nearest_forward<T>(a);
}
template <class T> void upsample2x_backward_cpu(const Upsample2xArgs& a) {
  if (a.NC * a.H * a.W == 0) return;
  if (a.bilinear) upsample2x_bilinear_backward<T>(a);
  else upsample2x_nearest_backward<T>(a);
}
// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
template <DType H, bool Backward> void upsample_half(const Upsample2xArgs& a) {
  Widen<H> w;
  Upsample2xArgs f = a;
  const int64_t xn = a.NC * a.H * a.W, yn = xn * 4;
  if (!Backward) { f.x = w.in(a.x, xn); f.y = w.out(a.y, yn); run_f32(upsample2x_forward_kernels(), f); }
  else { f.dy = w.in(a.dy, yn); f.dx = w.out(a.dx, xn); run_f32(upsample2x_backward_kernels(), f); }
  w.narrow();
}

template <DType H> void register_upsample_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&upsample_half<H, false>>(upsample2x_forward_kernels(), cpu, H);
  set_kernel<&upsample_half<H, true>>(upsample2x_backward_kernels(), cpu, H);
}
}  // namespace

void register_upsample_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(upsample2x_forward_kernels(), upsample2x_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(upsample2x_backward_kernels(), upsample2x_backward_cpu);
  register_upsample_half<DType::f16>();
  register_upsample_half<DType::bf16>();
}

}  // namespace oomlab
