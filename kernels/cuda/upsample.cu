// upsample.cu — CUDA kernels of the upsample family (kernels/upsample.h): upsample2x
// nearest / bilinear, forward and backward, in float32, float64, float16, bfloat16 (half
// types compute in float, one rounding). Parity: bit-identical to
// kernels/cpu/upsample_cpu.cpp in float32 (one thread per output element replays the
// CPU's taps, gather order and fused multiply-adds — pointwise_math.cuh; the backward is a
// gather, no atomics).
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/upsample.h"

namespace oomlab {
namespace {
using namespace cuda;

// ---- upsample2x ---------------------------------------------------------------------------
template <class T>
__global__ void upsample_fwd_kernel(const T* x, T* y, int64_t NC, int64_t H, int64_t W, bool bilinear) {
  using C = compute_t<T>;
  const int64_t H2 = 2 * H, W2 = 2 * W, n = NC * H2 * W2;
  for (int64_t i = gtid(); i < n; i += gstride()) {
    const int64_t ow = i % W2, oh = (i / W2) % H2, pl = i / (W2 * H2);
    const T* xp = x + pl * H * W;
    if (!bilinear) {
      y[i] = xp[(oh >> 1) * W + (ow >> 1)];
      continue;
    }
    const Tap th = axis_tap(oh, H);
    const T* r0 = xp + th.i0 * W;
    const T* r1 = xp + th.i1 * W;
    const C v0 = bilinear_row_at<C>([&](int64_t k) { return ld(r0[k]); }, W, ow);
    const C v1 = bilinear_row_at<C>([&](int64_t k) { return ld(r1[k]); }, W, ow);
    y[i] = st<T>(fma_rn(C(th.l0), v0, mul_rn(C(th.l1), v1)));
  }
}
template <class T>
__global__ void upsample_bwd_kernel(const T* dy, T* dx, int64_t NC, int64_t H, int64_t W, bool bilinear) {
  using C = compute_t<T>;
  const int64_t W2 = 2 * W, n = NC * H * W;
  for (int64_t i = gtid(); i < n; i += gstride()) {
    const int64_t w = i % W, h = (i / W) % H, pl = i / (W * H);
    const T* gp = dy + pl * 4 * H * W;
    if (!bilinear) {
      const T* g0 = gp + (2 * h) * W2 + 2 * w;
      const T* g1 = g0 + W2;
      dx[i] = st<T>(add_rn(add_rn(add_rn(ld(g0[0]), ld(g0[1])), ld(g1[0])), ld(g1[1])));
      continue;
    }
    C d = C(0);
    bool first = true;
    axis_gather(h, H, [&](int64_t oh, double lh) {
      const T* gr = gp + oh * W2;
      const C R = bilinear_row_adjoint_at<C>([&](int64_t k) { return ld(gr[k]); }, W, w);
      d = first ? mul_rn(C(lh), R) : fma_rn(C(lh), R, d);
      first = false;
    });
    dx[i] = st<T>(d);
  }
}
template <class T> void upsample2x_forward_cuda(const Upsample2xArgs& a) {
  if (a.NC * a.H * a.W == 0) return;
  const Launch L("upsample2x");
  upsample_fwd_kernel<T><<<grid_for(a.NC * a.H * a.W * 4), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), a.NC, a.H, a.W, a.bilinear);
  CUDA_LAUNCH_CHECK();
}
template <class T> void upsample2x_backward_cuda(const Upsample2xArgs& a) {
  if (a.NC * a.H * a.W == 0) return;
  const Launch L("upsample2x_backward");
  upsample_bwd_kernel<T><<<grid_for(a.NC * a.H * a.W), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.dy), static_cast<T*>(a.dx), a.NC, a.H, a.W, a.bilinear);
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_upsample_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(upsample2x_forward_kernels(), upsample2x_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(upsample2x_backward_kernels(), upsample2x_backward_cuda);
}

}  // namespace oomlab
