// vision.cu — CUDA kernels for the vision ops of engine/ops/vision_kernels.h: upsample2x
// nearest / bilinear (forward, backward), sigmoid (forward, backward) in float32, float64,
// float16, bfloat16 (half types compute in float, one rounding), and pixel_cross_entropy
// (forward, backward) in float32 / float64.
// Parity: upsample and sigmoid are bit-identical to kernels/cpu/vision_cpu.cpp in float32
// (one thread per output element replays the CPU's taps, gather order and fused
// multiply-adds — pointwise_math.cuh; the backward is a gather, no atomics). Pixel
// cross-entropy: one thread per pixel runs the CPU's class loop (max, double sum of exp_f32
// in class order, log in double), so logp matches up to the GPU's double log (nearly always
// the same float); the loss is summed in double over a fixed tree in one block (the same
// float except in rare ties). The backward needs the kept-pixel count before writing: a
// one-block kernel stores w = dloss / count in dlogits[0], the main kernel reads it and
// writes every element but that one, and a last one-thread kernel writes element 0.
#include "engine/ops/vision_kernels.h"
#include "kernels/cuda/pointwise_math.cuh"

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
  const Launch L(a.y, "upsample2x");
  upsample_fwd_kernel<T><<<grid_for(a.NC * a.H * a.W * 4), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), a.NC, a.H, a.W, a.bilinear);
  CUDA_LAUNCH_CHECK();
}
template <class T> void upsample2x_backward_cuda(const Upsample2xArgs& a) {
  if (a.NC * a.H * a.W == 0) return;
  const Launch L(a.dx, "upsample2x_backward");
  upsample_bwd_kernel<T><<<grid_for(a.NC * a.H * a.W), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.dy), static_cast<T*>(a.dx), a.NC, a.H, a.W, a.bilinear);
  CUDA_LAUNCH_CHECK();
}

// ---- sigmoid ------------------------------------------------------------------------------
template <class T> __global__ void sigmoid_fwd_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) y[i] = st<T>(sigmoid_fwd(ld(x[i])));
}
template <class T> __global__ void sigmoid_bwd_kernel(const T* y, const T* dy, T* dx, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) dx[i] = st<T>(sigmoid_bwd(ld(y[i]), ld(dy[i])));
}
template <class T> void sigmoid_forward_cuda(const SigmoidArgs& a) {
  if (a.n == 0) return;
  const Launch L(a.y, "sigmoid");
  sigmoid_fwd_kernel<T>
      <<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.n);
  CUDA_LAUNCH_CHECK();
}
template <class T> void sigmoid_backward_cuda(const SigmoidArgs& a) {
  if (a.n == 0) return;
  const Launch L(a.dx, "sigmoid_backward");
  sigmoid_bwd_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.y), static_cast<const T*>(a.dy), static_cast<T*>(a.dx), a.n);
  CUDA_LAUNCH_CHECK();
}

// ---- pixel cross-entropy ------------------------------------------------------------------
__device__ __forceinline__ bool px_kept(int64_t t, int64_t C, int64_t ignore) { return t != ignore && t >= 0 && t < C; }

// logp = x - max - log(sum exp(x - max)) over C, one thread per pixel (n, p).
template <class T> __global__ void pixel_logsoftmax_kernel(const T* x, T* lp, int64_t N, int64_t C, int64_t HW) {
  for (int64_t i = gtid(); i < N * HW; i += gstride()) {
    const int64_t n = i / HW, p = i - n * HW;
    const T* xb = x + n * C * HW + p;
    T* lb = lp + n * C * HW + p;
    T mx = xb[0];
    for (int64_t c = 1; c < C; ++c) {
      const T v = xb[c * HW];
      mx = v > mx ? v : mx;
    }
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) sum += double(exp_t(sub_rn(xb[c * HW], mx)));
    const T lse = T(log(sum));
    for (int64_t c = 0; c < C; ++c) lb[c * HW] = sub_rn(sub_rn(xb[c * HW], mx), lse);
  }
}
template <class T> __global__ void pixel_loss_kernel(const T* lp, const int64_t* target, T* loss, int64_t N, int64_t C,
                                                     int64_t HW, int64_t ignore) {
  double s = 0.0;
  long long cnt = 0;
  for (int64_t i = threadIdx.x; i < N * HW; i += blockDim.x) {
    const int64_t t = target[i];
    if (!px_kept(t, C, ignore)) continue;
    const int64_t n = i / HW, p = i - n * HW;
    s += double(lp[(n * C + t) * HW + p]);
    ++cnt;
  }
  const double total = block_sum(s);
  const long long count = block_sum(cnt);
  if (threadIdx.x == 0) *loss = T(-total / double(count));  // count 0 -> NaN, as PyTorch
}
// w = dloss / count into d[0] (element 0 is rewritten last by pixel_grad_first_kernel).
template <class T> __global__ void pixel_weight_kernel(const int64_t* target, const T* dloss, T* d, int64_t NHW,
                                                       int64_t C, int64_t ignore) {
  long long cnt = 0;
  for (int64_t i = threadIdx.x; i < NHW; i += blockDim.x) cnt += px_kept(target[i], C, ignore) ? 1 : 0;
  const long long count = block_sum(cnt);
  if (threadIdx.x == 0) d[0] = T(double(*dloss) / double(count));
}
template <class T> __device__ __forceinline__ T pixel_grad(const T* lp, const int64_t* target, int64_t i, int64_t C,
                                                           int64_t HW, int64_t ignore, T w) {
  const int64_t n = i / (C * HW), rem = i - n * C * HW, c = rem / HW, p = rem - c * HW;
  const int64_t t = target[n * HW + p];
  const bool k = px_kept(t, C, ignore);
  T v = mul_rn(exp_t(lp[i]), k ? w : T(0));
  if (k && t == c) v = sub_rn(v, w);
  return v;
}
template <class T> __global__ void pixel_grad_kernel(const T* lp, const int64_t* target, T* d, int64_t N, int64_t C,
                                                     int64_t HW, int64_t ignore) {
  const T w = d[0];
  for (int64_t i = gtid() + 1; i < N * C * HW; i += gstride()) d[i] = pixel_grad(lp, target, i, C, HW, ignore, w);
}
template <class T> __global__ void pixel_grad_first_kernel(const T* lp, const int64_t* target, T* d, int64_t C,
                                                           int64_t HW, int64_t ignore) {
  d[0] = pixel_grad(lp, target, 0, C, HW, ignore, d[0]);
}

template <class T> void pixel_cross_entropy_forward_cuda(const PixelCrossEntropyArgs& a) {
  const Launch L(a.loss, "pixel_cross_entropy");
  const T* x = static_cast<const T*>(a.logits);
  T* lp = static_cast<T*>(a.logp);
  if (a.C > 0 && a.N * a.HW > 0) {
    pixel_logsoftmax_kernel<T><<<grid_for(a.N * a.HW), kThreads, 0, L.stream>>>(x, lp, a.N, a.C, a.HW);
    CUDA_LAUNCH_CHECK();
  }
  pixel_loss_kernel<T>
      <<<1, 1024, 0, L.stream>>>(lp, a.target, static_cast<T*>(a.loss), a.N, a.C, a.C > 0 ? a.HW : 0, a.ignore_index);
  CUDA_LAUNCH_CHECK();
}
template <class T> void pixel_cross_entropy_backward_cuda(const PixelCrossEntropyArgs& a) {
  const int64_t total = a.N * a.C * a.HW;
  if (total == 0) return;
  const Launch L(a.dlogits, "pixel_cross_entropy_backward");
  const T* lp = static_cast<const T*>(a.logp);
  T* d = static_cast<T*>(a.dlogits);
  pixel_weight_kernel<T>
      <<<1, 1024, 0, L.stream>>>(a.target, static_cast<const T*>(a.dloss), d, a.N * a.HW, a.C, a.ignore_index);
  CUDA_LAUNCH_CHECK();
  if (total > 1) {
    pixel_grad_kernel<T>
        <<<grid_for(total - 1), kThreads, 0, L.stream>>>(lp, a.target, d, a.N, a.C, a.HW, a.ignore_index);
    CUDA_LAUNCH_CHECK();
  }
  pixel_grad_first_kernel<T><<<1, 1, 0, L.stream>>>(lp, a.target, d, a.C, a.HW, a.ignore_index);
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_vision_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(upsample2x_forward_kernels(), upsample2x_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(upsample2x_backward_kernels(), upsample2x_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(sigmoid_forward_kernels(), sigmoid_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(sigmoid_backward_kernels(), sigmoid_backward_cuda);
  OOMLAB_REGISTER_FLOAT_CUDA(pixel_cross_entropy_forward_kernels(), pixel_cross_entropy_forward_cuda);
  OOMLAB_REGISTER_FLOAT_CUDA(pixel_cross_entropy_backward_kernels(), pixel_cross_entropy_backward_cuda);
}

}  // namespace oomlab
