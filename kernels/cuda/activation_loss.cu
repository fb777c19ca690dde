// activation_loss.cu — CUDA kernels for relu / relu backward (activation.h; relu_ is relu
// with x == y), dropout forward / backward, softmax / log_softmax forward / backward and
// nll_loss forward / backward (loss.h).
// Dtypes: relu, dropout, softmax in float32, float64, float16, bfloat16 (half types compute
// in float, sums in double, one rounding at the store); nll in float32 / float64.
// Parity with the CPU kernels: relu and dropout are bit-identical (the keep-mask is the
// same Philox stream: element i keeps iff (block(seed, base + i/4)[i%4] >> 8) >= ceil(p 2^24));
// softmax rows use the CPU's 8-lane double sums in the same order (row_lanes.cuh), so they
// differ only where the GPU's exp/log differ from glibc's (float: exp through double,
// nearly always the same float; double: within an ulp); nll sums rows in double in a
// fixed tree (same float result except in rare ties; float64 within an ulp or two).
// Backward kernels overwrite their output; dloss is read on the device.
#include "engine/ops/activation.h"
#include "engine/ops/loss.h"
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/cuda/row_lanes.cuh"

namespace oomlab {
namespace {
using namespace cuda;

// ---- relu -------------------------------------------------------------------------------
template <class T> __global__ void relu_fwd_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) {
    const T v = x[i];
    const compute_t<T> f = ld(v);
    y[i] = (f > 0 || f != f) ? v : st<T>(0);  // NaN propagates, as torch.relu
  }
}
template <class T> __global__ void relu_bwd_kernel(const T* y, const T* dy, T* dx, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) dx[i] = ld(y[i]) <= 0 ? st<T>(0) : dy[i];
}
template <class T> void relu_forward_cuda(const ReluArgs& a) {
  if (a.n == 0) return;
  const Launch L(a.y, "relu");
  relu_fwd_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.n);
  CUDA_LAUNCH_CHECK();
}
template <class T> void relu_backward_cuda(const ReluArgs& a) {
  if (a.n == 0) return;
  const Launch L(a.dx, "relu_backward");
  relu_bwd_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<const T*>(a.y), static_cast<const T*>(a.dy),
                                                               static_cast<T*>(a.dx), a.n);
  CUDA_LAUNCH_CHECK();
}

// ---- dropout ----------------------------------------------------------------------------
// One thread per Philox block (4 elements).
template <class T> __global__ void dropout_fwd_kernel(const T* x, T* y, uint8_t* mask, int64_t n, uint32_t thr,
                                                      compute_t<T> scale, uint64_t seed, uint64_t base) {
  using C = compute_t<T>;
  const int64_t nblocks = (n + 3) / 4;
  for (int64_t b = gtid(); b < nblocks; b += gstride()) {
    const U4 w = philox_block(seed, base + uint64_t(b));
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t i = 4 * b + k;
      if (i >= n) break;
      const uint8_t keep = uint8_t((w.w[k] >> 8) >= thr);
      y[i] = st<T>(mul_rn(ld(x[i]), mul_rn(C(keep), scale)));
      if (mask) mask[i] = keep;
    }
  }
}
template <class T>
__global__ void dropout_bwd_kernel(const T* dy, const uint8_t* mask, T* dx, int64_t n, compute_t<T> scale) {
  using C = compute_t<T>;
  for (int64_t i = gtid(); i < n; i += gstride()) dx[i] = st<T>(mul_rn(ld(dy[i]), mul_rn(C(mask[i]), scale)));
}
template <class T> void dropout_forward_cuda(const DropoutArgs& a) {
  if (a.n == 0) return;
  const Launch L(a.y, "dropout");
  const uint32_t thr = uint32_t(std::ceil(a.p * 16777216.0));  // as the CPU kernel
  const compute_t<T> scale = compute_t<T>(1.0 / (1.0 - a.p));
  dropout_fwd_kernel<T><<<grid_for((a.n + 3) / 4), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.x), static_cast<T*>(a.y), a.mask, a.n, thr, scale, a.seed, a.base);
  CUDA_LAUNCH_CHECK();
}
template <class T> void dropout_backward_cuda(const DropoutArgs& a) {
  if (a.n == 0) return;
  const Launch L(a.dx, "dropout_backward");
  dropout_bwd_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.dy), a.mask, static_cast<T*>(a.dx), a.n, compute_t<T>(1.0 / (1.0 - a.p)));
  CUDA_LAUNCH_CHECK();
}

// ---- softmax / log_softmax ----------------------------------------------------------------
// 8 threads per row; y = exp(x - max) / sum, log: x - max - log(sum), sums in double.
template <class T> __global__ void softmax_fwd_kernel(const T* x, T* y, int64_t N, int64_t C, bool log_out) {
  using V = compute_t<T>;
  for_each_row_group(N, [&](int64_t r, bool valid) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    const V mx = lane_max8<V>(C, ld(xr[0]), [&](int64_t j) { return ld(xr[j]); });
    const double sum =
        lane_sum8(C, [&](double s, int64_t j, bool) { return add_rn(s, double(exp_libm(sub_rn(ld(xr[j]), mx)))); });
    if (log_out) {
      const V lse = V(log(sum));
      if (valid)
        for (int64_t j = lane8(); j < C; j += kLanes) yr[j] = st<T>(sub_rn(sub_rn(ld(xr[j]), mx), lse));
    } else {
      const V inv = V(1.0 / sum);
      if (valid)
        for (int64_t j = lane8(); j < C; j += kLanes) yr[j] = st<T>(mul_rn(exp_libm(sub_rn(ld(xr[j]), mx)), inv));
    }
  });
}
// softmax: dx = y * (dy - sum(dy * y)); log_softmax: dx = dy - exp(y) * sum(dy).
template <class T>
__global__ void softmax_bwd_kernel(const T* y, const T* dy, T* dx, int64_t N, int64_t C, bool log_out) {
  using V = compute_t<T>;
  for_each_row_group(N, [&](int64_t r, bool valid) {
    const T* yr = y + r * C;
    const T* gr = dy + r * C;
    T* dr = dx + r * C;
    if (log_out) {
      const V s = V(lane_sum8(C, [&](double acc, int64_t j, bool) { return add_rn(acc, double(ld(gr[j]))); }));
      if (valid)
        for (int64_t j = lane8(); j < C; j += kLanes) dr[j] = st<T>(fma_rn(-exp_libm(ld(yr[j])), s, ld(gr[j])));
    } else {
      const V s = V(lane_sum8(C, [&](double acc, int64_t j, bool fused) {
        return add_prod(acc, double(ld(gr[j])), double(ld(yr[j])), fused);
      }));
      if (valid)
        for (int64_t j = lane8(); j < C; j += kLanes) dr[j] = st<T>(mul_rn(ld(yr[j]), sub_rn(ld(gr[j]), s)));
    }
  });
}
template <class T> void softmax_forward_cuda(const SoftmaxArgs& a) {
  if (a.N == 0 || a.C == 0) return;
  const Launch L(a.y, "softmax");
  softmax_fwd_kernel<T>
      <<<row_grid(a.N), kThreads, 0, L.stream>>>(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.N, a.C, a.log);
  CUDA_LAUNCH_CHECK();
}
template <class T> void softmax_backward_cuda(const SoftmaxArgs& a) {
  if (a.N == 0 || a.C == 0) return;
  const Launch L(a.dx, "softmax_backward");
  softmax_bwd_kernel<T><<<row_grid(a.N), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.y), static_cast<const T*>(a.dy), static_cast<T*>(a.dx), a.N, a.C, a.log);
  CUDA_LAUNCH_CHECK();
}

// ---- nll_loss -----------------------------------------------------------------------------
__device__ __forceinline__ bool nll_kept(int64_t t, int64_t C, int64_t ignore) {
  return t != ignore && t >= 0 && t < C;
}

template <class T>
__global__ void nll_fwd_kernel(const T* lp, const int64_t* target, T* loss, int64_t N, int64_t C, int64_t ignore) {
  double s = 0.0;
  long long cnt = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) {
    const int64_t t = target[i];
    if (!nll_kept(t, C, ignore)) continue;
    s += double(lp[i * C + t]);
    ++cnt;
  }
  const double total = block_sum(s);
  const long long count = block_sum(cnt);
  if (threadIdx.x == 0) *loss = T(-total / double(count));  // count 0 -> NaN, as PyTorch
}
// Every block counts the kept rows itself (N cached reads) so no scratch memory is needed.
template <class T>
__global__ void nll_bwd_kernel(const int64_t* target, const T* dloss, T* d, int64_t N, int64_t C, int64_t ignore) {
  __shared__ T w_sh;
  long long cnt = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) cnt += nll_kept(target[i], C, ignore) ? 1 : 0;
  const long long count = block_sum(cnt);
  if (threadIdx.x == 0) w_sh = T(-double(*dloss) / double(count));
  __syncthreads();
  const T w = w_sh;
  for (int64_t i = gtid(); i < N * C; i += gstride()) {
    const int64_t r = i / C, c = i - r * C, t = target[r];
    d[i] = (c == t && nll_kept(t, C, ignore)) ? w : T(0);
  }
}
template <class T> void nll_forward_cuda(const NllArgs& a) {
  const Launch L(a.loss, "nll_loss");
  nll_fwd_kernel<T><<<1, 1024, 0, L.stream>>>(static_cast<const T*>(a.logp), a.target, static_cast<T*>(a.loss), a.N,
                                              a.C, a.ignore_index);
  CUDA_LAUNCH_CHECK();
}
template <class T> void nll_backward_cuda(const NllArgs& a) {
  if (a.N * a.C == 0) return;
  const Launch L(a.dlogp, "nll_loss_backward");
  nll_bwd_kernel<T><<<std::min(grid_for(a.N * a.C), 1024), kThreads, 0, L.stream>>>(
      a.target, static_cast<const T*>(a.dloss), static_cast<T*>(a.dlogp), a.N, a.C, a.ignore_index);
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_activation_loss_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(relu_forward_kernels(), relu_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(relu_backward_kernels(), relu_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(dropout_forward_kernels(), dropout_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(dropout_backward_kernels(), dropout_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(softmax_forward_kernels(), softmax_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(softmax_backward_kernels(), softmax_backward_cuda);
  OOMLAB_REGISTER_FLOAT_CUDA(nll_forward_kernels(), nll_forward_cuda);
  OOMLAB_REGISTER_FLOAT_CUDA(nll_backward_kernels(), nll_backward_cuda);
}

}  // namespace oomlab
