// conv_nhwc_cpu.cpp — CPU conv2d on channels_last buffers (kernels/conv.h with
// channels_last: x [N, H, W, C], w [K, R, S, C/groups], y [N, P, Q, K]; float, double) by
// im2col + GEMM in the layout's own orientation: an output pixel is a row, so
//   forward:         y[m, k_g] = col_g[m, :] . w_g[k, :]       (col_g [pixels, R*S*Cg])
//   backward data:   dcol_g = dy_g * w_g; col2im-add into dx   (per image: no write races)
//   backward weight: dw_g += dy_g^T * col_g, tiles in order     (dw's columns split by taps)
//   bias gradient:   db = column sums of dy [pixels, K], chunks of rows in order
// 1x1 / stride 1 / pad 0 / one group convs use x (or dx) as the col matrix directly;
// depthwise convs (groups == C == K) run direct loops over the channels (no GEMM).
// Tiles are kTileRows pixels fixed by the shapes alone, every GEMM is conv_cpu.cpp's
// single-threaded tile GEMM (BlasThreadsGuard), and every output element sums in an order that does not
// depend on the thread count: results are independent of OMP_NUM_THREADS.
#include "kernels/cpu/conv_nhwc_cpu.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/core/thread_budget.h"
#include "engine/memory/kernel_choices.h"

namespace oomlab {
namespace {

constexpr int64_t kTileRows = 256;   // output pixels per im2col panel
constexpr int64_t kSliceRows = 32;   // weight-gradient rows (filters) per parallel slice

template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
          T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  conv_tile_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

struct Shape2 {
  int64_t N, C, H, W, K, R, S, P, Q, G, Cg, Kg, RSC, M;
  Conv2dParams p;
  bool pointwise;   // 1x1, stride 1, no padding, one group: x is the col matrix
};

// The path a call takes, for kernel_choices.h (results' kernel_choices).
void note_nhwc(const char* op, bool depthwise, bool pointwise) {
  note_kernel_choice(op, depthwise ? "NHWC depthwise loops" : pointwise ? "NHWC 1x1 GEMM on x" : "NHWC im2col + GEMM");
}

Shape2 shape_of(const Conv2dArgs& a) {
  Shape2 s{};
  s.N = a.N; s.C = a.C; s.H = a.H; s.W = a.W; s.K = a.K; s.R = a.R; s.S = a.S; s.P = a.P; s.Q = a.Q;
  s.p = a.p;
  s.G = std::max<int64_t>(a.p.groups, 1);
  s.Cg = s.C / s.G; s.Kg = s.K / s.G; s.RSC = s.R * s.S * s.Cg; s.M = s.N * s.P * s.Q;
  s.pointwise = s.R == 1 && s.S == 1 && s.G == 1 && a.p.stride_h == 1 && a.p.stride_w == 1 && a.p.pad_h == 0 &&
                a.p.pad_w == 0;
  return s;
}

template <class T> std::vector<T>& panel() {
  thread_local std::vector<T> buf;
  return buf;
}

// Input row/column of tap (r, s) for output pixel (p, q); false when it falls in the padding.
inline bool tap(const Shape2& s, int64_t p, int64_t q, int64_t r, int64_t t, int64_t& ih, int64_t& iw) {
  ih = p * s.p.stride_h - s.p.pad_h + r * s.p.dil_h;
  iw = q * s.p.stride_w - s.p.pad_w + t * s.p.dil_w;
  return ih >= 0 && ih < s.H && iw >= 0 && iw < s.W;
}

// col[i, (r*S+t)*Cg + c] = x[n, ih, iw, g*Cg + c] for the pixels m0 + i (0 in the padding).
template <class T> void im2col(const Shape2& s, const T* x, int64_t g, int64_t m0, int64_t rows, T* col) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t m = m0 + i, q = m % s.Q, p = (m / s.Q) % s.P, n = m / (s.P * s.Q);
    T* dst = col + i * s.RSC;
    for (int64_t r = 0; r < s.R; ++r)
      for (int64_t t = 0; t < s.S; ++t, dst += s.Cg) {
        int64_t ih, iw;
        if (tap(s, p, q, r, t, ih, iw))
          std::memcpy(dst, x + ((n * s.H + ih) * s.W + iw) * s.C + g * s.Cg, size_t(s.Cg) * sizeof(T));
        else std::fill(dst, dst + s.Cg, T(0));
      }
  }
}

// dx[n, ih, iw, g*Cg + c] += dcol[i, (r*S+t)*Cg + c], rows in order.
template <class T> void col2im_add(const Shape2& s, const T* dcol, int64_t g, int64_t m0, int64_t rows, T* dx) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t m = m0 + i, q = m % s.Q, p = (m / s.Q) % s.P, n = m / (s.P * s.Q);
    const T* src = dcol + i * s.RSC;
    for (int64_t r = 0; r < s.R; ++r)
      for (int64_t t = 0; t < s.S; ++t, src += s.Cg) {
        int64_t ih, iw;
        if (!tap(s, p, q, r, t, ih, iw)) continue;
        T* d = dx + ((n * s.H + ih) * s.W + iw) * s.C + g * s.Cg;
        for (int64_t c = 0; c < s.Cg; ++c) d[c] += src[c];
      }
  }
}

// ---- depthwise (groups == C == K): each channel its own R x S filter, channels innermost --
// y[n, p, q, c] = sum_{r, s} x[n, ih, iw, c] * w[c, r, s]: no GEMM (one output channel per
// group would make it a matrix-vector product per pixel); the channel loop vectorises.
bool depthwise(const Shape2& s) { return s.G > 1 && s.Cg == 1 && s.Kg == 1; }

template <class T> void depthwise_forward(const Shape2& s, const T* x, const T* w, T* y) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < s.M; ++m) {
    const int64_t q = m % s.Q, p = (m / s.Q) % s.P, n = m / (s.P * s.Q);
    T* out = y + m * s.C;
    std::fill(out, out + s.C, T(0));
    for (int64_t r = 0; r < s.R; ++r)
      for (int64_t t = 0; t < s.S; ++t) {
        int64_t ih, iw;
        if (!tap(s, p, q, r, t, ih, iw)) continue;
        const T* in = x + ((n * s.H + ih) * s.W + iw) * s.C;
        const T* wt = w + r * s.S + t;
        for (int64_t c = 0; c < s.C; ++c) out[c] += in[c] * wt[c * s.R * s.S];
      }
  }
}

// dx per image (its pixels in order: no write races); dw per image into its own row of
// partials, the images then added in order.
template <class T> void depthwise_backward(const Shape2& s, const T* x, const T* w, const T* dy, T* dx, T* dw) {
  const int64_t PQ = s.P * s.Q, RS = s.R * s.S;
  std::vector<T> part(dw ? size_t(s.N * s.C * RS) : 0);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < s.N; ++n) {
    if (dx) std::fill(dx + n * s.H * s.W * s.C, dx + (n + 1) * s.H * s.W * s.C, T(0));
    T* pw = dw ? part.data() + n * s.C * RS : nullptr;
    for (int64_t m = n * PQ; m < (n + 1) * PQ; ++m) {
      const int64_t q = m % s.Q, p = (m / s.Q) % s.P;
      const T* g = dy + m * s.C;
      for (int64_t r = 0; r < s.R; ++r)
        for (int64_t t = 0; t < s.S; ++t) {
          int64_t ih, iw;
          if (!tap(s, p, q, r, t, ih, iw)) continue;
          const int64_t off = ((n * s.H + ih) * s.W + iw) * s.C, k = r * s.S + t;
          if (dx)
            for (int64_t c = 0; c < s.C; ++c) dx[off + c] += g[c] * w[c * RS + k];
          if (pw)
            for (int64_t c = 0; c < s.C; ++c) pw[c * RS + k] += g[c] * x[off + c];
        }
    }
  }
  if (!dw) return;
  std::fill(dw, dw + s.C * RS, T(0));
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t i = 0; i < s.C * RS; ++i) dw[i] += part[size_t(n * s.C * RS + i)];
}

template <class T> void forward(const Conv2dArgs& a) {
  const Shape2 s = shape_of(a);
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  T* y = static_cast<T*>(a.y);
  note_nhwc("conv2d_forward", depthwise(s), s.pointwise);
  if (depthwise(s)) return depthwise_forward(s, x, w, y);
  BlasThreadsGuard serial{1};
  const int64_t tiles = (s.M + kTileRows - 1) / kTileRows;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t ti = 0; ti < tiles; ++ti) {
    const int64_t m0 = ti * kTileRows, rows = std::min(kTileRows, s.M - m0);
    if (s.pointwise) {
      gemm<T>(false, true, rows, s.K, s.C, x + m0 * s.C, s.C, w, s.C, T(0), y + m0 * s.K, s.K);
      continue;
    }
    std::vector<T>& col = panel<T>();
    col.resize(size_t(rows * s.RSC));
    for (int64_t g = 0; g < s.G; ++g) {
      im2col(s, x, g, m0, rows, col.data());
      gemm<T>(false, true, rows, s.Kg, s.RSC, col.data(), s.RSC, w + g * s.Kg * s.RSC, s.RSC, T(0),
              y + m0 * s.K + g * s.Kg, s.K);
    }
  }
}

template <class T> void backward_data(const Conv2dArgs& a) {
  const Shape2 s = shape_of(a);
  const T* dy = static_cast<const T*>(a.dy);
  const T* w = static_cast<const T*>(a.w);
  T* dx = static_cast<T*>(a.dx);
  note_nhwc("conv2d_backward_data", depthwise(s), s.pointwise);
  if (depthwise(s)) return depthwise_backward<T>(s, nullptr, w, dy, dx, nullptr);
  BlasThreadsGuard serial{1};
  const int64_t PQ = s.P * s.Q;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t n = 0; n < s.N; ++n) {
    if (s.pointwise) {
      for (int64_t m0 = n * PQ; m0 < (n + 1) * PQ; m0 += kTileRows)
        gemm<T>(false, false, std::min(kTileRows, (n + 1) * PQ - m0), s.C, s.K, dy + m0 * s.K, s.K, w, s.C, T(0),
                dx + m0 * s.C, s.C);
      continue;
    }
    std::fill(dx + n * s.H * s.W * s.C, dx + (n + 1) * s.H * s.W * s.C, T(0));
    std::vector<T>& dcol = panel<T>();
    for (int64_t m0 = n * PQ; m0 < (n + 1) * PQ; m0 += kTileRows) {
      const int64_t rows = std::min(kTileRows, (n + 1) * PQ - m0);
      dcol.resize(size_t(rows * s.RSC));
      for (int64_t g = 0; g < s.G; ++g) {
        gemm<T>(false, false, rows, s.RSC, s.Kg, dy + m0 * s.K + g * s.Kg, s.K, w + g * s.Kg * s.RSC, s.RSC, T(0),
                dcol.data(), s.RSC);
        col2im_add(s, dcol.data(), g, m0, rows, dx);
      }
    }
  }
}

// col[i, t*Cg + c] for the taps [t0, t1) only (t = r*S + s): a slice of im2col's columns.
template <class T>
void im2col_taps(const Shape2& s, const T* x, int64_t g, int64_t m0, int64_t rows, int64_t t0, int64_t t1, T* col) {
  const int64_t width = (t1 - t0) * s.Cg;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t m = m0 + i, q = m % s.Q, p = (m / s.Q) % s.P, n = m / (s.P * s.Q);
    T* dst = col + i * width;
    for (int64_t t = t0; t < t1; ++t, dst += s.Cg) {
      int64_t ih, iw;
      if (tap(s, p, q, t / s.S, t % s.S, ih, iw))
        std::memcpy(dst, x + ((n * s.H + ih) * s.W + iw) * s.C + g * s.Cg, size_t(s.Cg) * sizeof(T));
      else std::fill(dst, dst + s.Cg, T(0));
    }
  }
}

// One OpenMP region per call: the work is cut into column slices of dw fixed by the shapes
// (groups of taps of >= 64 columns; 1x1 convolutions: slices of kSliceRows filters), and
// each slice walks every tile in order, so every dw element sums alike whatever the threads,
// and each im2col column is built once (by the slice that owns its tap).
template <class T> void backward_weight(const Conv2dArgs& a) {
  const Shape2 s = shape_of(a);
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  T* dw = static_cast<T*>(a.dw);
  note_nhwc("conv2d_backward_weight", depthwise(s), s.pointwise);
  if (depthwise(s)) return depthwise_backward<T>(s, x, nullptr, dy, nullptr, dw);
  BlasThreadsGuard serial{1};
  std::fill(dw, dw + s.K * s.RSC, T(0));
  const int64_t taps = s.R * s.S, per = std::max<int64_t>(1, (64 + s.Cg - 1) / s.Cg);
  const int64_t tap_groups = (taps + per - 1) / per, k_slices = (s.Kg + kSliceRows - 1) / kSliceRows;
  const int64_t work = s.G * (s.pointwise ? k_slices : tap_groups);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t item = 0; item < work; ++item) {
    const int64_t g = item / (s.pointwise ? k_slices : tap_groups), sl = item % (s.pointwise ? k_slices : tap_groups);
    std::vector<T>& col = panel<T>();
    for (int64_t m0 = 0; m0 < s.M; m0 += kTileRows) {   // tiles in order
      const int64_t rows = std::min(kTileRows, s.M - m0);
      const T* dyg = dy + m0 * s.K + g * s.Kg;
      if (s.pointwise) {
        const int64_t k0 = sl * kSliceRows, kn = std::min(kSliceRows, s.Kg - k0);
        gemm<T>(true, false, kn, s.C, rows, dyg + k0, s.K, x + m0 * s.C, s.C, T(1), dw + k0 * s.RSC, s.RSC);
        continue;
      }
      const int64_t t0 = sl * per, t1 = std::min(taps, t0 + per), width = (t1 - t0) * s.Cg;
      col.resize(size_t(rows * width));
      im2col_taps(s, x, g, m0, rows, t0, t1, col.data());
      gemm<T>(true, false, s.Kg, width, rows, dyg, s.K, col.data(), width, T(1), dw + g * s.Kg * s.RSC + t0 * s.Cg,
              s.RSC);
    }
  }
}
// db[k] = sum over the rows of dy [M, K]: per chunk of kTileRows rows a row of double
// accumulators (OpenMP over chunks), the chunks added in order: independent of threads.
template <class T> void bias_grad_rows(const ChannelBiasArgs& a) {
  const int64_t M = a.N * a.HW, K = a.K, chunks = (M + kTileRows - 1) / kTileRows;
  const T* dy = static_cast<const T*>(a.dy);
  std::vector<double> part(size_t(chunks * K), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double* acc = part.data() + c * K;
    for (int64_t m = c * kTileRows; m < std::min(M, (c + 1) * kTileRows); ++m)
      for (int64_t k = 0; k < K; ++k) acc[k] += double(dy[m * K + k]);
  }
  T* db = static_cast<T*>(a.db);
  for (int64_t k = 0; k < K; ++k) {
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c) s += part[size_t(c * K + k)];
    db[k] = T(s);
  }
}
}  // namespace

void channel_bias_grad_rows_f32(const ChannelBiasArgs& a) { bias_grad_rows<float>(a); }
void channel_bias_grad_rows_f64(const ChannelBiasArgs& a) { bias_grad_rows<double>(a); }

void conv2d_forward_nhwc_f32(const Conv2dArgs& a) { forward<float>(a); }
void conv2d_forward_nhwc_f64(const Conv2dArgs& a) { forward<double>(a); }
void conv2d_backward_data_nhwc_f32(const Conv2dArgs& a) { backward_data<float>(a); }
void conv2d_backward_data_nhwc_f64(const Conv2dArgs& a) { backward_data<double>(a); }
void conv2d_backward_weight_nhwc_f32(const Conv2dArgs& a) { backward_weight<float>(a); }
void conv2d_backward_weight_nhwc_f64(const Conv2dArgs& a) { backward_weight<double>(a); }

}  // namespace oomlab
