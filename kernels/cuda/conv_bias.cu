// conv_bias.cu — the conv family's NCHW channel-bias kernels (kernels/conv.h), float32 /
// float64 / float16 / bfloat16; registered from conv.cu (register_conv_cuda_kernels):
//   channel_bias_add   y[n, k, :] += b[k]                (accumulates into y; with relu,
//                      y = relu(y + b[k]) in the same pass: conv2d_relu, --fuse-relu); a flat
//                      grid with a division per element, or under OOMLAB_CUDA_BIAS_PLANES
//                      (cuda_settings.h) a (plane, position) grid without one, the same bits
//   channel_bias_grad  db[k] = sum_{n, hw} dy[n, k, hw]  (overwrites)
// The add runs in the compute type (T for float/double, float for half types). The
// reduction accumulates in double (the CPU kernel's accumulator) in a fixed,
// shape-determined order (dense_common.cuh): a (splits, channels) grid whose per-block
// partials (workspace-tagged scratch, [K][S] doubles) are added in split order.
// channels_last ([N*P*Q, K] rows): the partial sums are batchnorm_nhwc.cuh's coalesced
// 32-channel x 8-row blocks (sum_body, checked on emulated blocks by cuda_bn_nhwc_check),
// the same [K][S] partials and finish.
#include <algorithm>

#include "kernels/conv.h"
#include "kernels/cuda/batchnorm_nhwc.cuh"
#include "kernels/cuda/block_ctx.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_device.h"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/cuda_stream.h"
#include "kernels/cuda/dense_common.cuh"

namespace oomlab {
namespace {
namespace dense = cuda::dense;
using dense::kBlock;
using dense::Num;

template <class T>
__global__ void channel_bias_add_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t K, int64_t HW, int64_t n,
                                        bool relu) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const typename Num<T>::C v = Num<T>::to(y[i]) + Num<T>::to(b[(i / HW) % K]);
    y[i] = Num<T>::from(relu && !(v > 0 || v != v) ? typename Num<T>::C(0) : v);   // relu's rule (conv2d_relu)
  }
}

// The same add over (plane, position) with no per-element division (OOMLAB_CUDA_BIAS_PLANES):
// plane p = (n, k) holds HW contiguous elements and reads its bias b[p % K] once; the same
// arithmetic as channel_bias_add_kernel, so the same bits.
template <class T>
__global__ void channel_bias_add_planes_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t K, int64_t HW,
                                               int64_t planes, bool relu) {
  using C = typename Num<T>::C;
  for (int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
    const C bias = Num<T>::to(b[p % K]);
    T* yp = y + p * HW;
    for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < HW; j += int64_t(gridDim.x) * blockDim.x) {
      const C v = Num<T>::to(yp[j]) + bias;
      yp[j] = Num<T>::from(relu && !(v > 0 || v != v) ? C(0) : v);
    }
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

template <class T> __global__ void rows_partial_sum_kernel(bn_nhwc::Split sp, const T* __restrict__ dy, double* part) {
  __shared__ bn_nhwc::Smem sm;
  bn_nhwc::sum_body<bn_nhwc::DeviceIO<T>>(cuda::DeviceCtx{}, sp, dy, part, sm);
}

template <class T>
__global__ void channel_sum_finish_kernel(const double* __restrict__ part, int64_t K, int64_t S, T* __restrict__ db) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < K; k += int64_t(gridDim.x) * blockDim.x) {
    double acc = 0.0;
    for (int64_t s = 0; s < S; ++s) acc += part[k * S + s];
    db[k] = Num<T>::from(typename Num<T>::C(acc));
  }
}

constexpr int64_t kPlaneMin = 32;   // shorter planes (small maps, channels_last's HW = 1): the flat kernel

template <class T> void channel_bias_add_cuda(const ChannelBiasArgs& a) {
  const int64_t n = a.N * a.K * a.HW;
  if (n == 0) return;
  const int dev = cuda::kernel_device("channel_bias_add");
  cuda::DeviceGuard guard(dev);
  if (cuda_bias_planes() && a.HW >= kPlaneMin) {   // NCHW planes (channels_last passes HW = 1)
    const int64_t planes = a.N * a.K, xs = std::min<int64_t>((a.HW + 4 * kBlock - 1) / (4 * kBlock), 32);
    const dim3 grid{unsigned(xs), unsigned(std::min<int64_t>(planes, 65535))};
    channel_bias_add_planes_kernel<T><<<grid, kBlock, 0, cuda::compute_stream(dev)>>>(
        static_cast<T*>(a.y), static_cast<const T*>(a.b), a.K, a.HW, planes, a.relu);
  } else {
    channel_bias_add_kernel<T><<<dense::grid_for(n), kBlock, 0, cuda::compute_stream(dev)>>>(
        static_cast<T*>(a.y), static_cast<const T*>(a.b), a.K, a.HW, n, a.relu);
  }
  CUDA_LAUNCH_CHECK();
}

template <class T> void channel_bias_grad_cuda(const ChannelBiasArgs& a) {
  if (a.K == 0) return;
  const int dev = cuda::kernel_device("channel_bias_grad");
  cuda::DeviceGuard guard(dev);
  cudaStream_t stream = cuda::compute_stream(dev);
  T* db = static_cast<T*>(a.db);
  if (a.N * a.HW == 0) {   // empty sum
    CUDA_CHECK(cudaMemsetAsync(db, 0, size_t(a.K) * sizeof(T), stream));
    return;
  }
  if (a.channels_last) {   // [N*P*Q, K] rows: coalesced partials over 32 channels at a time
    const bn_nhwc::Split rs = bn_nhwc::split_for(a.N * a.HW, a.K);
    cuda::DeviceBuffer scratch(dev, size_t(a.K * rs.S) * sizeof(double));
    double* part = static_cast<double*>(scratch.get());
    rows_partial_sum_kernel<T><<<dim3{unsigned(rs.S), unsigned(rs.tiles)}, bn_nhwc::kThreads, 0, stream>>>(
        rs, static_cast<const T*>(a.dy), part);
    CUDA_LAUNCH_CHECK();
    channel_sum_finish_kernel<T><<<dense::grid_for(a.K), kBlock, 0, stream>>>(part, a.K, rs.S, db);
    CUDA_LAUNCH_CHECK();
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

template <class T> void set_channel_bias(DType t) {
  set_kernel<&channel_bias_add_cuda<T>>(channel_bias_add_kernels(), DeviceType::cuda, t);
  set_kernel<&channel_bias_grad_cuda<T>>(channel_bias_grad_kernels(), DeviceType::cuda, t);
}
}  // namespace

void register_conv_bias_cuda_kernels() {
  set_channel_bias<float>(DType::f32);
  set_channel_bias<double>(DType::f64);
  set_channel_bias<__half>(DType::f16);
  set_channel_bias<__nv_bfloat16>(DType::bf16);
}

}  // namespace oomlab
