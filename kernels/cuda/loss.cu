// loss.cu — CUDA kernels of the loss family (kernels/loss.h) in float32 / float64:
// nll_loss (also float16 / bfloat16: values widened on load, the loss and the gradient
// weight computed in float and rounded once, as the CPU's 16-bit kernel) and
// pixel_cross_entropy (float32 / float64 only: its backward keeps a per-call weight in
// dlogits[0], which 16 bits cannot hold), forward and backward; dloss is read on the device and
// backward kernels overwrite their output. nll sums rows in double in a fixed tree (the
// same float as kernels/cpu/loss_cpu.cpp except in rare ties; float64 within an ulp or two).
// Pixel cross-entropy: one thread per pixel runs the CPU's class loop (max, double sum of
// exp_f32 in class order, log in double), so logp matches up to the GPU's double log
// (nearly always the same float); the loss is summed in double over a fixed tree in one
// block. Its backward needs the kept-pixel count before writing: a one-block kernel stores
// w = dloss / count in dlogits[0], the main kernel reads it and writes every element but
// that one, and a last one-thread kernel writes element 0. nll's backward stores 16 bytes at a
// time where aligned (the same values). count_correct: one warp a row
// runs kernels/loss.h's argmax rule on the device (argmax_row.cuh), the count read back from
// host-mapped memory. Copying the logits to the host instead (the path before) cost GPT-2's
// [1024, 50257] logits a 206 MB copy a step: on the H100 (kit run of aa21f01) the graph_gpt2
// b8 s128 TF32 step took 341.4 ms that way and 32.7 ms on the device, the same final loss.
#include <algorithm>

#include "kernels/cuda/argmax_row.cuh"
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/cuda/vector_map.cuh"
#include "kernels/loss.h"

namespace oomlab {
namespace {
using namespace cuda;

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
    s += double(ld(lp[i * C + t]));
    ++cnt;
  }
  const double total = block_sum(s);
  const long long count = block_sum(cnt);
  if (threadIdx.x == 0) *loss = st<T>(compute_t<T>(-total / double(count)));  // count 0 -> NaN, as PyTorch
}
// Every block counts the kept rows itself (N cached reads) so no scratch memory is needed.
// Vec (d 16-byte aligned): 16 bytes per store (vector_map.cuh's
// Pack), the same values bit for bit; else one element per store.
template <class T, bool Vec>
__global__ void nll_bwd_kernel(const int64_t* target, const T* dloss, T* d, int64_t N, int64_t C, int64_t ignore) {
  __shared__ T w_sh;
  long long cnt = 0;
  for (int64_t i = threadIdx.x; i < N; i += blockDim.x) cnt += nll_kept(target[i], C, ignore) ? 1 : 0;
  const long long count = block_sum(cnt);
  if (threadIdx.x == 0) w_sh = st<T>(compute_t<T>(-double(ld(*dloss)) / double(count)));
  __syncthreads();
  const T w = w_sh, zero = st<T>(compute_t<T>(0));
  auto value = [&](int64_t i) {
    const int64_t r = i / C, c = i - r * C, t = target[r];
    return (c == t && nll_kept(t, C, ignore)) ? w : zero;
  };
  constexpr int V = Vec ? kVecOf<T> : 1;
  const int64_t n = N * C, nv = Vec ? n / V : 0;
  for (int64_t j = gtid(); j < nv; j += gstride()) {
    Pack<T> y;
#pragma unroll
    for (int k = 0; k < V; ++k) y.v[k] = value(j * V + k);
    reinterpret_cast<Pack<T>*>(d)[j] = y;
  }
  for (int64_t i = nv * V + gtid(); i < n; i += gstride()) d[i] = value(i);
}
template <class T> void nll_forward_cuda(const NllArgs& a) {
  const Launch L("nll_loss");
  nll_fwd_kernel<T><<<1, 1024, 0, L.stream>>>(static_cast<const T*>(a.logp), a.target, static_cast<T*>(a.loss), a.N,
                                              a.C, a.ignore_index);
  CUDA_LAUNCH_CHECK();
}
template <class T> void nll_backward_cuda(const NllArgs& a) {
  if (a.N * a.C == 0) return;
  const Launch L("nll_loss_backward");
  const bool vec = aligned16(a.dlogp);
  const int blocks = std::min(grid_for(vec ? a.N * a.C / kVecOf<T> + 1 : a.N * a.C), 1024);
  auto kernel = vec ? nll_bwd_kernel<T, true> : nll_bwd_kernel<T, false>;
  kernel<<<blocks, kThreads, 0, L.stream>>>(a.target, static_cast<const T*>(a.dloss), static_cast<T*>(a.dlogp), a.N,
                                            a.C, a.ignore_index);
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
  const Launch L("pixel_cross_entropy");
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
  const Launch L("pixel_cross_entropy_backward");
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
// ---- count_correct ------------------------------------------------------------------------
// One warp a row (argmax_row.cuh: each lane's first maximum, then a shuffle tree); block b
// writes its rows' count to part[b] (host-mapped memory, one plain store; the host adds the
// blocks once the stream has synchronised).
template <class T>
__global__ void count_correct_kernel(const T* x, const int64_t* target, int64_t N, int64_t C, long long* part) {
  namespace am = argmax_row;
  const int lane = threadIdx.x & 31, warps = int(blockDim.x >> 5);
  long long mine = 0;
  for (int64_t r = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); r < N; r += int64_t(gridDim.x) * warps) {
    am::Best b = am::lane_best(lane, C, [&](int64_t j) { return double(ld(x[r * C + j])); });
    for (int o = 16; o > 0; o >>= 1)
      b = am::merge(b, am::Best{__shfl_down_sync(0xffffffffu, b.v, o), __shfl_down_sync(0xffffffffu, b.j, o)});
    if (lane == 0 && b.j >= 0 && b.j == target[r]) ++mine;
  }
  const long long total = block_sum(mine);
  if (threadIdx.x == 0) part[blockIdx.x] = total;
}

constexpr int kCountBlocks = 1024;
long long* mapped_counts() {   // this thread's host-mapped block counts (kept for the process)
  thread_local long long* p = nullptr;
  if (!p) CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&p), kCountBlocks * sizeof(long long),
                                   cudaHostAllocMapped | cudaHostAllocPortable));
  return p;
}

template <class T> void count_correct_cuda(const CountCorrectArgs& a) {
  OOMLAB_ASSERT(a.s1 == 1 && a.s0 == a.C && a.ts == 1);   // the op passes contiguous tensors
  *a.correct = 0;
  if (a.N == 0 || a.C == 0) return;
  const Launch L("count_correct");
  long long* part = mapped_counts();
  long long* dpart = nullptr;
  CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dpart), part, 0));
  const int blocks = int(std::min<int64_t>((a.N + 7) / 8, kCountBlocks));
  count_correct_kernel<T><<<blocks, kThreads, 0, L.stream>>>(static_cast<const T*>(a.logits), a.target, a.N, a.C,
                                                            dpart);
  CUDA_LAUNCH_CHECK();
  CUDA_CHECK(cudaStreamSynchronize(L.stream));
  for (int b = 0; b < blocks; ++b) *a.correct += part[b];
}
}  // namespace

void register_loss_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(nll_forward_kernels(), nll_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(nll_backward_kernels(), nll_backward_cuda);
  OOMLAB_REGISTER_FLOAT_CUDA(pixel_cross_entropy_forward_kernels(), pixel_cross_entropy_forward_cuda);
  OOMLAB_REGISTER_FLOAT_CUDA(pixel_cross_entropy_backward_kernels(), pixel_cross_entropy_backward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(count_correct_kernels(), count_correct_cuda);
}

}  // namespace oomlab
