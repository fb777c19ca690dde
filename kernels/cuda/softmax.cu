// softmax.cu — CUDA kernels of the softmax family (kernels/softmax.h): softmax /
// log_softmax and the attention masked_softmax, forward and backward, in float32, float64,
// float16 and bfloat16 (half types compute in float, sums in double, one rounding at the
// store). 8 threads per row (row_lanes.cuh): row sums are the CPU's 8-lane double sums in
// its order, so softmax rows differ from kernels/cpu/softmax_cpu.cpp only where the GPU's
// exp/log differ from glibc's (float: exp through double, nearly always the same float;
// double: within an ulp). masked_softmax: padded keys (mask[b, c] != 0, b = row /
// rows_per_batch) score -inf, a row with every key padded gives zeros; exp is the CPU's
// exp_nonpos, so float32 rows are bit-identical. Backward kernels overwrite dx.
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/cuda/row_lanes.cuh"
#include "kernels/softmax.h"

namespace oomlab {
namespace {
using namespace cuda;

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
  const Launch L("softmax");
  softmax_fwd_kernel<T>
      <<<row_grid(a.N), kThreads, 0, L.stream>>>(static_cast<const T*>(a.x), static_cast<T*>(a.y), a.N, a.C, a.log);
  CUDA_LAUNCH_CHECK();
}
template <class T> void softmax_backward_cuda(const SoftmaxArgs& a) {
  if (a.N == 0 || a.C == 0) return;
  const Launch L("softmax_backward");
  softmax_bwd_kernel<T><<<row_grid(a.N), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.y), static_cast<const T*>(a.dy), static_cast<T*>(a.dx), a.N, a.C, a.log);
  CUDA_LAUNCH_CHECK();
}

// ---- masked_softmax ---------------------------------------------------------------------
template <class T> __global__ void masked_softmax_fwd_kernel(const T* x, const uint8_t* mask, T* y, int64_t rows,
                                                             int64_t C, int64_t rows_per_batch, compute_t<T> sc,
                                                             int64_t causal_tq) {
  using V = compute_t<T>;
  for_each_row_group(rows, [&](int64_t r, bool valid) {
    const T* xr = x + r * C;
    T* yr = y + r * C;
    const uint8_t* mr = mask ? mask + (r / rows_per_batch) * C : nullptr;
    const int64_t n = causal_tq > 0 ? (r % causal_tq + 1 < C ? r % causal_tq + 1 : C) : C;   // visible keys
    int kept = 0;  // kept visible keys of this row's batch entry (any order: an integer count)
    if (mr) {
      for (int64_t j = lane8(); j < n; j += kLanes) kept += mr[j] == 0;
#pragma unroll
      for (int o = 4; o > 0; o >>= 1) kept += __shfl_xor_sync(0xffffffffu, kept, o, kLanes);
    }
    if (mr && kept == 0) {  // every key padded: zeros (not NaN); uniform within the row group
      if (valid)
        for (int64_t j = lane8(); j < C; j += kLanes) yr[j] = st<T>(V(0));
    }
    auto score = [&](int64_t j) { return (j >= n || (mr && mr[j])) ? V(-INFINITY) : mul_rn(sc, ld(xr[j])); };
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
  const Launch L("masked_softmax");
  masked_softmax_fwd_kernel<T><<<row_grid(a.rows), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.x), a.mask, static_cast<T*>(a.y), a.rows, a.C, a.rows_per_batch, compute_t<T>(a.scale),
      a.causal_tq);
  CUDA_LAUNCH_CHECK();
}
template <class T> void masked_softmax_backward_cuda(const MaskedSoftmaxArgs& a) {
  if (a.C == 0 || a.rows == 0) return;
  const Launch L("masked_softmax_backward");
  masked_softmax_bwd_kernel<T>
      <<<row_grid(a.rows), kThreads, 0, L.stream>>>(static_cast<const T*>(a.y), static_cast<const T*>(a.dy),
                                                    static_cast<T*>(a.dx), a.rows, a.C, compute_t<T>(a.scale));
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_softmax_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(softmax_forward_kernels(), softmax_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(softmax_backward_kernels(), softmax_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(masked_softmax_forward_kernels(), masked_softmax_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(masked_softmax_backward_kernels(), masked_softmax_backward_cuda);
}

}  // namespace oomlab
