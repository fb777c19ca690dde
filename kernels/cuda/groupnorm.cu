// groupnorm.cu — CUDA kernels of the groupnorm family (kernels/groupnorm.h) in float32,
// float64 and 16-bit (loaded as float, statistics float32 for 16-bit x, one rounding at the
// store), with the CPU's arithmetic (kernels/cpu/groupnorm_cpu.cpp): statistics and every
// sum in double, values computed in double and rounded once. One block per (n, g) group for
// the statistics, y and dx; one block per channel for dweight / dbias. Block sums use a
// fixed tree (block_sum): bitwise reproducible run to run, no atomics; they may differ from
// the CPU's sequential double sums in the last bits of a double, rarely in T.
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/groupnorm.h"

namespace oomlab {
namespace {
using namespace cuda;

// The block's total of v, in every thread.
__device__ __forceinline__ double block_allsum(double v) {
  __shared__ double total;
  const double r = block_sum(v);
  if (threadIdx.x == 0) total = r;
  __syncthreads();
  const double out = total;
  __syncthreads();
  return out;
}

template <class T, class P = compute_t<T>>
__global__ void gn_forward_kernel(const T* x, const T* w, const T* b, T* y, P* mean_out, P* rstd_out, int64_t NG,
                                  int64_t G, int64_t Cg, int64_t HW, double eps) {
  const int64_t M = Cg * HW;
  for (int64_t ng = blockIdx.x; ng < NG; ng += gridDim.x) {
    const int64_t g = ng % G;
    const T* xg = x + ng * M;
    T* yg = y + ng * M;
    double s = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) s += double(ld(xg[i]));
    const double mean = M > 0 ? block_allsum(s) / double(M) : 0.0;
    double ss = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const double d = double(ld(xg[i])) - mean;
      ss += d * d;
    }
    const double var = M > 0 ? block_allsum(ss) / double(M) : 0.0;
    const double rstd = 1.0 / sqrt(var + eps);
    if (threadIdx.x == 0) {
      mean_out[ng] = P(mean);
      rstd_out[ng] = P(rstd);
    }
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const int64_t c = g * Cg + i / HW;
      const double wc = w ? double(ld(w[c])) : 1.0, bc = b ? double(ld(b[c])) : 0.0;
      yg[i] = st<T>(compute_t<T>((double(ld(xg[i])) - mean) * rstd * wc + bc));
    }
  }
}

template <class T, class P = compute_t<T>>
__global__ void gn_dx_kernel(const T* x, const T* w, const T* dy, const P* mean_in, const P* rstd_in, T* dx,
                             int64_t NG, int64_t G, int64_t Cg, int64_t HW) {
  const int64_t M = Cg * HW;
  for (int64_t ng = blockIdx.x; ng < NG; ng += gridDim.x) {
    const int64_t g = ng % G;
    const double mean = double(mean_in[ng]), rstd = double(rstd_in[ng]);
    const T* xg = x + ng * M;
    const T* dyg = dy + ng * M;
    double s1 = 0, s2 = 0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const double wc = w ? double(ld(w[g * Cg + i / HW])) : 1.0;
      const double gw = double(ld(dyg[i])) * wc;
      s1 += gw;
      s2 += gw * (double(ld(xg[i])) - mean) * rstd;
    }
    const double m1 = M > 0 ? block_allsum(s1) / double(M) : 0.0;
    const double m2 = M > 0 ? block_allsum(s2) / double(M) : 0.0;
    for (int64_t i = threadIdx.x; i < M; i += blockDim.x) {
      const double wc = w ? double(ld(w[g * Cg + i / HW])) : 1.0;
      const double xhat = (double(ld(xg[i])) - mean) * rstd;
      dx[ng * M + i] = st<T>(compute_t<T>(rstd * (double(ld(dyg[i])) * wc - m1 - xhat * m2)));
    }
  }
}

template <class T, class P = compute_t<T>>
__global__ void gn_param_grad_kernel(const T* x, const T* dy, const P* mean_in, const P* rstd_in, T* dw, T* db,
                                     int64_t N, int64_t C, int64_t G, int64_t HW) {
  const int64_t Cg = C / G;
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    const int64_t g = c / Cg;
    double sw = 0, sb = 0;
    for (int64_t i = threadIdx.x; i < N * HW; i += blockDim.x) {
      const int64_t n = i / HW, p = i - n * HW;
      const double mean = double(mean_in[n * G + g]), rstd = double(rstd_in[n * G + g]);
      const int64_t o = (n * C + c) * HW + p;
      const double d = double(ld(dy[o]));
      sb += d;
      sw += d * (double(ld(x[o])) - mean) * rstd;
    }
    const double tw = block_allsum(sw), tb = block_allsum(sb);
    if (threadIdx.x == 0) {
      if (dw) dw[c] = st<T>(compute_t<T>(tw));
      if (db) db[c] = st<T>(compute_t<T>(tb));
    }
  }
}

int blocks_for(int64_t n) { return int(std::max<int64_t>(1, std::min<int64_t>(n, 65535 * 4))); }

template <class T> void group_norm_forward_cuda(const GroupNormArgs& a) {
  using P = compute_t<T>;
  const int64_t NG = a.N * a.G;
  if (NG == 0) return;
  const Launch L("group_norm");
  gn_forward_kernel<T><<<blocks_for(NG), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.x), static_cast<const T*>(a.weight), static_cast<const T*>(a.bias), static_cast<T*>(a.y),
      static_cast<P*>(a.mean), static_cast<P*>(a.rstd), NG, a.G, a.C / a.G, a.HW, a.eps);
  CUDA_LAUNCH_CHECK();
}

template <class T> void group_norm_backward_cuda(const GroupNormArgs& a) {
  using P = compute_t<T>;
  const int64_t NG = a.N * a.G;
  const Launch L("group_norm_backward");
  const T* x = static_cast<const T*>(a.x);
  const T* dy = static_cast<const T*>(a.dy);
  const P* mean = static_cast<const P*>(a.mean);
  const P* rstd = static_cast<const P*>(a.rstd);
  if (a.dx && NG > 0) {
    gn_dx_kernel<T><<<blocks_for(NG), kThreads, 0, L.stream>>>(x, static_cast<const T*>(a.weight), dy, mean, rstd,
                                                                static_cast<T*>(a.dx), NG, a.G, a.C / a.G, a.HW);
    CUDA_LAUNCH_CHECK();
  }
  if ((a.dweight || a.dbias) && a.C > 0) {
    gn_param_grad_kernel<T><<<blocks_for(a.C), kThreads, 0, L.stream>>>(
        x, dy, mean, rstd, static_cast<T*>(a.dweight), static_cast<T*>(a.dbias), a.N, a.C, a.G, a.HW);
    CUDA_LAUNCH_CHECK();
  }
}
}  // namespace

void register_groupnorm_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(group_norm_forward_kernels(), group_norm_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(group_norm_backward_kernels(), group_norm_backward_cuda);
}

}  // namespace oomlab
