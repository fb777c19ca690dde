// layernorm.cu — CUDA kernels of the layernorm family (kernels/layernorm.h), in float32,
// float64, float16, bfloat16.
// Forward: 8 threads per row, mean and variance as the CPU's 8-lane double sums
// (bit-identical statistics and y for float32; float64 too up to the GPU's sqrt/division,
// which are IEEE-rounded). Half types normalise with float statistics and save mean/rstd
// in float32 (the contract, as PyTorch: rstd overflows half for near-constant rows).
// Backward: dx per row as the CPU (same sums, same order); dweight / dbias per column in
// double over row splits (enough blocks to fill the GPU; per-split sums in
// workspace-tagged scratch) of 8 row segments each, combined in order — deterministic,
// equal to kernels/cpu/layernorm_cpu.cpp's sequential double sum after rounding except in
// rare ties.
// Under cuda_ln_unroll() (OOMLAB_CUDA_LN_UNROLL=1, default off: not yet run on a GPU) the
// forward and dx kernels unroll their row loops 16 times over __restrict__ data (kLnUnroll):
// the same operations in the same order, more loads in flight (on the H100 BERT-base's
// synchronized layer_norm spans took ~5 ms a step against PyTorch's ~1.3).
#include <algorithm>
#include <optional>

#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/cuda/row_lanes.cuh"
#include "kernels/layernorm.h"

namespace oomlab {
namespace {
using namespace cuda;
// Loads in flight per thread under cuda_ln_unroll(): the main loops unrolled 16 times, the
// data __restrict__ (the stores no longer order the next loads), so that a 132-SM GPU with
// BERT's 4096 rows (8 warps an SM) has ~16 KiB of reads in flight per SM, not ~4.
constexpr int kLnUnroll = 16;

// ---- layer_norm -------------------------------------------------------------------------
// U: lane_sum8's unroll (row_lanes.cuh); the store loop is unrolled as much.
template <class T, int U>
__device__ __forceinline__ void layer_norm_fwd_body(const T* x, const T* w, const T* b, T* y, compute_t<T>* mean,
                                                    compute_t<T>* rstd, int64_t rows, int64_t H, double eps) {
  using C = compute_t<T>;
  for_each_row_group(rows, [&](int64_t r, bool valid) {
    const T* xr = x + r * H;
    T* yr = y + r * H;
    double mu = 0.0, var = 0.0;
    if (H > 0) {
      mu = lane_sum8<U>(H, [&](double s, int64_t j, bool) { return add_rn(s, double(ld(xr[j]))); }) / double(H);
      var = lane_sum8<U>(H,
                         [&](double s, int64_t j, bool fused) {
                           const double d = double(ld(xr[j])) - mu;
                           return add_prod(s, d, d, fused);
                         }) /
            double(H);
    }
    const double rs = 1.0 / sqrt(var + eps);
    if (!valid) return;
    if (lane8() == 0) {
      mean[r] = C(mu);
      rstd[r] = C(rs);
    }
    const C m = C(mu), s = C(rs);
    auto store = [&](int64_t j) {
      const C wj = w ? ld(w[j]) : C(1), bj = b ? ld(b[j]) : C(0);
      yr[j] = st<T>(layer_norm_y(ld(xr[j]), m, s, w ? &wj : nullptr, b ? &bj : nullptr));
    };
    if constexpr (U == 0) {
      for (int64_t j = lane8(); j < H; j += kLanes) store(j);
    } else {
#pragma unroll U
      for (int64_t j = lane8(); j < H; j += kLanes) store(j);
    }
  });
}
template <class T> __global__ void layer_norm_fwd_kernel(const T* x, const T* w, const T* b, T* y, compute_t<T>* mean,
                                                         compute_t<T>* rstd, int64_t rows, int64_t H, double eps) {
  layer_norm_fwd_body<T, 0>(x, w, b, y, mean, rstd, rows, H, eps);
}
template <class T>
__global__ void layer_norm_fwd_unrolled_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                               const T* __restrict__ b, T* __restrict__ y,
                                               compute_t<T>* __restrict__ mean, compute_t<T>* __restrict__ rstd,
                                               int64_t rows, int64_t H, double eps) {
  layer_norm_fwd_body<T, kLnUnroll>(x, w, b, y, mean, rstd, rows, H, eps);
}

// dx = rstd * (w*dy - mean(w*dy) - xhat * mean(w*dy * xhat)), per row.
template <class T, int U>
__device__ __forceinline__ void layer_norm_dx_body(const T* x, const T* w, const compute_t<T>* mean,
                                                   const compute_t<T>* rstd, const T* dy, T* dx, int64_t rows,
                                                   int64_t H) {
  using C = compute_t<T>;
  for_each_row_group(rows, [&](int64_t r, bool valid) {
    const T* xr = x + r * H;
    const T* gr = dy + r * H;
    const C m = mean[r], s = rstd[r];
    auto wdy = [&](int64_t j) { return w ? mul_rn(ld(gr[j]), ld(w[j])) : ld(gr[j]); };
    const double sum_g = lane_sum8<U>(H, [&](double acc, int64_t j, bool) { return add_rn(acc, double(wdy(j))); });
    const double sum_gx = lane_sum8<U>(H, [&](double acc, int64_t j, bool fused) {
      return add_prod(acc, double(wdy(j)), double(mul_rn(sub_rn(ld(xr[j]), m), s)), fused);
    });
    const C ma = C(sum_g / double(H)), mb = C(sum_gx / double(H));
    if (!valid) return;
    auto store = [&](int64_t j) { dx[r * H + j] = st<T>(layer_norm_dx(wdy(j), ld(xr[j]), m, s, ma, mb)); };
    if constexpr (U == 0) {
      for (int64_t j = lane8(); j < H; j += kLanes) store(j);
    } else {
#pragma unroll U
      for (int64_t j = lane8(); j < H; j += kLanes) store(j);
    }
  });
}
template <class T> __global__ void layer_norm_dx_kernel(const T* x, const T* w, const compute_t<T>* mean,
                                                        const compute_t<T>* rstd,
                                                        const T* dy, T* dx, int64_t rows, int64_t H) {
  layer_norm_dx_body<T, 0>(x, w, mean, rstd, dy, dx, rows, H);
}
template <class T>
__global__ void layer_norm_dx_unrolled_kernel(const T* __restrict__ x, const T* __restrict__ w,
                                              const compute_t<T>* __restrict__ mean,
                                              const compute_t<T>* __restrict__ rstd, const T* __restrict__ dy,
                                              T* __restrict__ dx, int64_t rows, int64_t H) {
  layer_norm_dx_body<T, kLnUnroll>(x, w, mean, rstd, dy, dx, rows, H);
}

// dweight[c] = sum_r dy * xhat, dbias[c] = sum_r dy: block (x: 32 columns, y: row split)
// of 32 columns x 8 row segments of its split's rows. With one split it writes dw/db; with
// several, each writes its split's sums to pw/pb[split][H] and layer_norm_dwb_finish_kernel
// adds the splits in order.
template <class T>
__global__ void layer_norm_dwb_kernel(const T* x, const compute_t<T>* mean, const compute_t<T>* rstd, const T* dy,
                                      T* dw, T* db, double* pw, double* pb, int64_t rows, int64_t H,
                                      int64_t rows_per_split) {
  using C = compute_t<T>;
  __shared__ double part_w[8][32], part_b[8][32];
  const int lane = int(threadIdx.x & 31), seg = int(threadIdx.x >> 5);
  const int64_t s0 = int64_t(blockIdx.y) * rows_per_split;   // a trailing split may be empty
  const int64_t s1 = s0 + rows_per_split < rows ? s0 + rows_per_split : (rows > s0 ? rows : s0);
  const int64_t per = (s1 - s0 + 7) / 8, r0 = s0 + seg * per, r1 = r0 + per < s1 ? r0 + per : s1;
  for (int64_t c0 = int64_t(blockIdx.x) * 32; c0 < H; c0 += int64_t(gridDim.x) * 32) {
    const int64_t c = c0 + lane;
    double aw = 0.0, ab = 0.0;
    if (c < H)
      for (int64_t r = r0; r < r1; ++r) {
        const C g = ld(dy[r * H + c]), xhat = mul_rn(sub_rn(ld(x[r * H + c]), mean[r]), rstd[r]);
        if constexpr (std::is_same_v<C, double>)
          aw = fma_rn(g, xhat, aw);  // fused on the CPU too
        else
          aw += double(mul_rn(g, xhat));
        ab += double(g);
      }
    part_w[seg][lane] = aw;
    part_b[seg][lane] = ab;
    __syncthreads();
    if (seg == 0 && c < H) {
      double tw = 0.0, tb = 0.0;
      for (int k = 0; k < 8; ++k) {
        tw += part_w[k][lane];
        tb += part_b[k][lane];
      }
      if (pw) {
        pw[int64_t(blockIdx.y) * H + c] = tw;
        pb[int64_t(blockIdx.y) * H + c] = tb;
      } else {
        if (dw) dw[c] = st<T>(C(tw));
        if (db) db[c] = st<T>(C(tb));
      }
    }
    __syncthreads();
  }
}

template <class T>
__global__ void layer_norm_dwb_finish_kernel(const double* pw, const double* pb, int64_t splits, int64_t H, T* dw,
                                             T* db) {
  using C = compute_t<T>;
  for (int64_t c = gtid(); c < H; c += gstride()) {
    double tw = 0.0, tb = 0.0;
    for (int64_t s = 0; s < splits; ++s) {
      tw += pw[s * H + c];
      tb += pb[s * H + c];
    }
    if (dw) dw[c] = st<T>(C(tw));
    if (db) db[c] = st<T>(C(tb));
  }
}

// Row splits for layer_norm_dwb: about 1056 blocks with the column tiles (8 per SM on a
// 132-SM GPU) and >= 64 rows per block; shapes alone decide, so results are reproducible.
int64_t dwb_row_splits(int64_t rows, int64_t tiles) {
  const int64_t by_grid = (1056 + tiles - 1) / tiles, by_rows = rows / 64;
  return std::clamp<int64_t>(std::min(by_grid, by_rows), 1, 65535);
}

template <class T> void layer_norm_forward_cuda(const LayerNormArgs& a) {
  if (a.rows == 0) return;
  const Launch L("layer_norm");
  auto* kernel = cuda_ln_unroll() ? layer_norm_fwd_unrolled_kernel<T> : layer_norm_fwd_kernel<T>;
  kernel<<<row_grid(a.rows), kThreads, 0, L.stream>>>(
      static_cast<const T*>(a.x), static_cast<const T*>(a.weight), static_cast<const T*>(a.bias), static_cast<T*>(a.y),
      static_cast<compute_t<T>*>(a.mean), static_cast<compute_t<T>*>(a.rstd), a.rows, a.H, a.eps);
  CUDA_LAUNCH_CHECK();
}
template <class T> void layer_norm_backward_cuda(const LayerNormArgs& a) {
  const Launch L("layer_norm_backward");
  const T* x = static_cast<const T*>(a.x);
  const auto* mean = static_cast<const compute_t<T>*>(a.mean);
  const auto* rstd = static_cast<const compute_t<T>*>(a.rstd);
  const T* dy = static_cast<const T*>(a.dy);
  if (a.dx && a.rows > 0 && a.H > 0) {
    auto* kernel = cuda_ln_unroll() ? layer_norm_dx_unrolled_kernel<T> : layer_norm_dx_kernel<T>;
    kernel<<<row_grid(a.rows), kThreads, 0, L.stream>>>(x, static_cast<const T*>(a.weight), mean, rstd, dy,
                                                        static_cast<T*>(a.dx), a.rows, a.H);
    CUDA_LAUNCH_CHECK();
  }
  if ((a.dweight || a.dbias) && a.H > 0) {
    const int64_t tiles = std::min<int64_t>((a.H + 31) / 32, 65535);
    const int64_t splits = dwb_row_splits(a.rows, tiles), per = (a.rows + splits - 1) / splits;
    T* dw = static_cast<T*>(a.dweight);
    T* db = static_cast<T*>(a.dbias);
    // Freed on return: later work on the stream that reuses the block runs after both kernels.
    std::optional<cuda::DeviceBuffer> scratch;
    double *pw = nullptr, *pb = nullptr;
    if (splits > 1) {
      scratch.emplace(L.dev, size_t(2 * splits * a.H) * sizeof(double));
      pw = static_cast<double*>(scratch->get());
      pb = pw + splits * a.H;
    }
    layer_norm_dwb_kernel<T><<<dim3(unsigned(tiles), unsigned(splits)), kThreads, 0, L.stream>>>(
        x, mean, rstd, dy, dw, db, pw, pb, a.rows, a.H, std::max<int64_t>(per, 1));
    CUDA_LAUNCH_CHECK();
    if (splits > 1) {
      layer_norm_dwb_finish_kernel<T><<<grid_for(a.H), kThreads, 0, L.stream>>>(pw, pb, splits, a.H, dw, db);
      CUDA_LAUNCH_CHECK();
    }
  }
}
}  // namespace

void register_layernorm_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(layer_norm_forward_kernels(), layer_norm_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(layer_norm_backward_kernels(), layer_norm_backward_cuda);
}

}  // namespace oomlab
