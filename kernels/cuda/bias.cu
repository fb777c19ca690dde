// bias.cu — CUDA kernels for the bias family, float32 / float64 / float16 / bfloat16:
//   bias_add_rows     out[r, c] += bias[c]                  (linear.h; accumulates into out)
//   bias_grad_rows    grad_bias[c] = sum_r grad[r, c]       (linear.h; overwrites)
//   channel_bias_add  y[n, k, :] += b[k]                    (conv.h; accumulates into y)
//   channel_bias_grad db[k] = sum_{n, hw} dy[n, k, hw]      (conv.h; overwrites)
// Adds run in the compute type (T for float/double, float for half types). Reductions
// accumulate in double (the CPU kernels' accumulator) in a fixed, shape-determined order
// (dense_common.cuh): channel_bias_grad on a (splits, channels) grid whose per-block
// partials (workspace-tagged scratch, [K][S] doubles) are added in split order; for
// bias_grad_rows one block per 8 columns, 64 row lanes summed in lane order.
#include "engine/ops/conv.h"
#include "engine/ops/linear.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/dense_common.cuh"

namespace oomlab {
namespace {
namespace dense = cuda::dense;
using dense::kBlock;
using dense::Num;

template <class T>
__global__ void bias_add_rows_kernel(T* __restrict__ out, const T* __restrict__ b, int64_t cols, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = Num<T>::from(Num<T>::to(out[i]) + Num<T>::to(b[i % cols]));
}

template <class T>
__global__ void channel_bias_add_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t K, int64_t HW, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = Num<T>::from(Num<T>::to(y[i]) + Num<T>::to(b[(i / HW) % K]));
}

// Column sums of a row-major [rows, cols] matrix: block (kColTile x kRowLanes) owns
// kColTile columns; lane y sums rows y, y + kRowLanes, ...; lanes are added in order.
constexpr int kColTile = 8, kRowLanes = 64;
template <class T>
__global__ void col_sum_kernel(const T* __restrict__ g, int64_t rows, int64_t cols, T* __restrict__ db) {
  __shared__ double sh[kRowLanes][kColTile + 1];
  for (int64_t c0 = int64_t(blockIdx.x) * kColTile; c0 < cols; c0 += int64_t(gridDim.x) * kColTile) {
    const int64_t c = c0 + threadIdx.x;
    double acc = 0.0;
    if (c < cols) {
      int64_t r = threadIdx.y;
      for (; r + 3 * kRowLanes < rows; r += 4 * kRowLanes) {
        const double v0 = double(Num<T>::to(g[r * cols + c]));
        const double v1 = double(Num<T>::to(g[(r + kRowLanes) * cols + c]));
        const double v2 = double(Num<T>::to(g[(r + 2 * kRowLanes) * cols + c]));
        const double v3 = double(Num<T>::to(g[(r + 3 * kRowLanes) * cols + c]));
        acc += v0; acc += v1; acc += v2; acc += v3;
      }
      for (; r < rows; r += kRowLanes) acc += double(Num<T>::to(g[r * cols + c]));
    }
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      double s = 0.0;
      for (int k = 0; k < kRowLanes; ++k) s += sh[k][threadIdx.x];
      db[c] = Num<T>::from(typename Num<T>::C(s));
    }
    __syncthreads();
  }
}

// Channel sums, split (dense::ChannelSplit): pass 1 part[k][s] = the chunk's sum; pass 2
// db[k] = the S partials added in order.
template <class T>
__global__ void channel_partial_sum_kernel(const T* __restrict__ dy, int64_t K, int64_t HW, int64_t M, int64_t S,
                                           int64_t chunk, double* __restrict__ part) {
  int64_t m0, m1;
  dense::chunk_of(M, chunk, m0, m1);
  for (int64_t k = blockIdx.y; k < K; k += gridDim.y) {
    double acc[1] = {0.0};
    dense::for_channel(k, K, HW, m0, m1, [&](int64_t o) { acc[0] += double(Num<T>::to(dy[o])); });
    dense::block_allsum<1>(acc);
    if (threadIdx.x == 0) part[k * S + blockIdx.x] = acc[0];
  }
}

template <class T>
__global__ void channel_sum_finish_kernel(const double* __restrict__ part, int64_t K, int64_t S, T* __restrict__ db) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < K; k += int64_t(gridDim.x) * blockDim.x) {
    double acc = 0.0;
    for (int64_t s = 0; s < S; ++s) acc += part[k * S + s];
    db[k] = Num<T>::from(typename Num<T>::C(acc));
  }
}

// ---- host entries ----------------------------------------------------------------------

template <class T> void bias_add_rows_cuda(const BiasAddRowsArgs& a) {
  const int64_t n = a.rows * a.cols;
  if (n == 0) return;
  const int dev = cuda::device_of(a.out, "bias_add_rows");
  cuda::DeviceGuard guard(dev);
  bias_add_rows_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<T*>(a.out), static_cast<const T*>(a.bias), a.cols, n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void bias_grad_rows_cuda(const BiasGradRowsArgs& a) {
  if (a.cols == 0) return;
  const int dev = cuda::device_of(a.grad_bias, "bias_grad_rows");
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::compute_stream(dev);
  T* db = static_cast<T*>(a.grad_bias);
  if (a.rows == 0) {   // empty sum
    CUDA_CHECK(cudaMemsetAsync(db, 0, size_t(a.cols) * sizeof(T), stream));
    return;
  }
  const int64_t tiles = (a.cols + kColTile - 1) / kColTile;
  const dim3 grid{unsigned(tiles < 65535 ? tiles : 65535)}, block{unsigned(kColTile), unsigned(kRowLanes)};
  col_sum_kernel<T><<<grid, block, 0, stream>>>(static_cast<const T*>(a.grad), a.rows, a.cols, db);
  CUDA_LAUNCH_CHECK();
}

template <class T> void channel_bias_add_cuda(const ChannelBiasArgs& a) {
  const int64_t n = a.N * a.K * a.HW;
  if (n == 0) return;
  const int dev = cuda::device_of(a.y, "channel_bias_add");
  cuda::DeviceGuard guard(dev);
  channel_bias_add_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
      static_cast<T*>(a.y), static_cast<const T*>(a.b), a.K, a.HW, n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void channel_bias_grad_cuda(const ChannelBiasArgs& a) {
  if (a.K == 0) return;
  const int dev = cuda::device_of(a.db, "channel_bias_grad");
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::compute_stream(dev);
  T* db = static_cast<T*>(a.db);
  if (a.N * a.HW == 0) {   // empty sum
    CUDA_CHECK(cudaMemsetAsync(db, 0, size_t(a.K) * sizeof(T), stream));
    return;
  }
  const dense::ChannelSplit sp(a.N * a.HW, a.K);
  // Freed on return: later work on the stream that reuses the block runs after both passes.
  cuda::DeviceBuffer scratch(dev, size_t(a.K * sp.S) * sizeof(double));
  double* part = static_cast<double*>(scratch.get());
  channel_partial_sum_kernel<T><<<sp.grid, dense::kChanThreads, 0, stream>>>(static_cast<const T*>(a.dy), a.K, a.HW,
                                                                               sp.M, sp.S, sp.chunk, part);
  CUDA_LAUNCH_CHECK();
  channel_sum_finish_kernel<T><<<dense::grid_for(a.K), kBlock, 0, stream>>>(part, a.K, sp.S, db);
  CUDA_LAUNCH_CHECK();
}

template <class T> void set_all(DType t) {
  bias_add_rows_kernels().set(DeviceType::cuda, t, &bias_add_rows_cuda<T>);
  bias_grad_rows_kernels().set(DeviceType::cuda, t, &bias_grad_rows_cuda<T>);
  channel_bias_add_kernels().set(DeviceType::cuda, t, &channel_bias_add_cuda<T>);
  channel_bias_grad_kernels().set(DeviceType::cuda, t, &channel_bias_grad_cuda<T>);
}
}  // namespace

void register_bias_cuda_kernels() {
  set_all<float>(DType::f32);
  set_all<double>(DType::f64);
  set_all<__half>(DType::f16);
  set_all<__nv_bfloat16>(DType::bf16);
}

}  // namespace oomlab
