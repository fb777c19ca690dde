// gelu_softmax.cu — CUDA kernels for gelu (erf and tanh forms, forward and backward) and
// the attention masked_softmax (forward, backward) of engine/ops/transformer_kernels.h,
// in float32, float64, float16 and bfloat16 (half types compute in float, one rounding).
// Parity: gelu float32 is bit-identical to the CPU kernel (same exp_f32, the same
// Abramowitz & Stegun erf, the same fused multiply-adds — pointwise_math.cuh); float64
// uses the GPU's exp / erf (within an ulp or two of glibc's).
// masked_softmax: 8 threads per row (row_lanes.cuh); padded keys (mask[b, c] != 0,
// b = row / rows_per_batch) score -inf, a row with every key padded gives zeros; the row
// sum is the CPU's 8-lane double sum in its order, exp the CPU's exp_nonpos, so float32
// rows are bit-identical. Backward: dx = scale * y * (dy - sum(dy * y)).
#include "engine/ops/transformer_kernels.h"
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/cuda/row_lanes.cuh"

namespace oomlab {
namespace {
using namespace cuda;

// ---- gelu -------------------------------------------------------------------------------
template <class T> __global__ void gelu_fwd_kernel(const T* x, T* y, int64_t n, bool tanh_approx) {
  for (int64_t i = gtid(); i < n; i += gstride()) y[i] = st<T>(gelu_fwd(ld(x[i]), tanh_approx));
}
template <class T> __global__ void gelu_bwd_kernel(const T* x, const T* dy, T* dx, int64_t n, bool tanh_approx) {
  for (int64_t i = gtid(); i < n; i += gstride()) dx[i] = st<T>(gelu_bwd(ld(x[i]), ld(dy[i]), tanh_approx));
}
template <class T> void gelu_forward_cuda(const GeluArgs& a) {
  if (a.n == 0) return;
  const Launch L(a.y, "gelu");
  gelu_fwd_kernel<T>
      <<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.n, a.tanh_approx);
  CUDA_LAUNCH_CHECK();
}
template <class T> void gelu_backward_cuda(const GeluArgs& a) {
  if (a.n == 0) return;
  const Launch L(a.dx, "gelu_backward");
  gelu_bwd_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<const T*>(a.x), static_cast<const T*>(a.dy),
                                                               static_cast<T*>(a.dx), a.n, a.tanh_approx);
  CUDA_LAUNCH_CHECK();
}

// ---- masked_softmax ---------------------------------------------------------------------
template <class T> __global__ void masked_softmax_fwd_kernel(const T* x, const uint8_t* mask, T* y, int64_t rows,
                                                             int64_t C, int64_t rows_per_batch, compute_t<T> sc) {
  using V = compute_t<T>;
  for_each_row_group(rows, [&](int64_t r, bool valid) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    const uint8_t* mr = mask ? mask + (r / rows_per_batch) * C : nullptr;
    int kept = 0;  // kept keys of this row's batch entry (any order: an integer count)
    if (mr) {
      for (int64_t j = lane8(); j < C; j += kLanes) kept += mr[j] == 0;
#pragma unroll
      for (int o = 4; o > 0; o >>= 1) kept += __shfl_xor_sync(0xffffffffu, kept, o, kLanes);
    }
    if (mr && kept == 0) {  // every key padded: zeros (not NaN); uniform within the row group
      if (valid)
        for (int64_t j = lane8(); j < C; j += kLanes) yr[j] = st<T>(V(0));
    }
    auto score = [&](int64_t j) { return (mr && mr[j]) ? V(-INFINITY) : mul_rn(sc, ld(xr[j])); };
    const V mx = lane_max8<V>(C, V(-INFINITY), score);
    auto e = [&](int64_t j) { return exp_nonpos(sub_rn(score(j), mx)); };
    const double sum = lane_sum8(C, [&](double s, int64_t j, bool) { return add_rn(s, double(e(j))); });
    const V inv = V(1.0 / sum);
    if (valid && !(mr && kept == 0))
      for (int64_t j = lane8(); j < C; j += kLanes) yr[j] = st<T>(mul_rn(e(j), inv));
  });
}
template <class T>
__global__ void masked_softmax_bwd_kernel(const T* y, const T* dy, T* dx, int64_t rows, int64_t C, compute_t<T> sc) {
  using V = compute_t<T>;
  for_each_row_group(rows, [&](int64_t r, bool valid) {
    const T* yr = y + r * C;
    const T* gr = dy + r * C;
    const V s = V(lane_sum8(C, [&](double acc, int64_t j, bool fused) {
      return add_prod(acc, double(ld(gr[j])), double(ld(yr[j])), fused);
    }));
    if (valid)
      for (int64_t j = lane8(); j < C; j += kLanes)
        dx[r * C + j] = st<T>(mul_rn(mul_rn(sc, ld(yr[j])), sub_rn(ld(gr[j]), s)));
  });
}
template <class T> void masked_softmax_forward_cuda(const MaskedSoftmaxArgs& a) {
  if (a.C == 0 || a.rows == 0) return;
  const Launch L(a.y, "masked_softmax");
  masked_softmax_fwd_kernel<T><<<row_grid(a.rows), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.x), a.mask, static_cast<T*>(a.y), a.rows, a.C, a.rows_per_batch, compute_t<T>(a.scale));
  CUDA_LAUNCH_CHECK();
}
template <class T> void masked_softmax_backward_cuda(const MaskedSoftmaxArgs& a) {
  if (a.C == 0 || a.rows == 0) return;
  const Launch L(a.dx, "masked_softmax_backward");
  masked_softmax_bwd_kernel<T>
      <<<row_grid(a.rows), kThreads, 0, L.stream>>>(static_cast<const T*>(a.y), static_cast<const T*>(a.dy),
                                                    static_cast<T*>(a.dx), a.rows, a.C, compute_t<T>(a.scale));
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_gelu_softmax_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(gelu_forward_kernels(), gelu_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(gelu_backward_kernels(), gelu_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(masked_softmax_forward_kernels(), masked_softmax_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(masked_softmax_backward_kernels(), masked_softmax_backward_cuda);
}

}  // namespace oomlab
