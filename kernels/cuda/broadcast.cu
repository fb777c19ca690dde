// broadcast.cu — CUDA kernels of the broadcast family (kernels/broadcast.h) in float32,
// float64, float16 and bfloat16 (half types compute in float, one rounding at the store):
// the strided binary op, a grid-stride loop over the output; sum_to, one block per output
// element whose threads stride over its summed inputs, combined in double by block_sum's
// fixed tree (deterministic; equal to the CPU's in-order double sum after rounding to
// float32 except in rare ties). Launched on the device's compute stream.
#include "kernels/broadcast.h"
#include "kernels/cuda/launch_utils.cuh"

namespace oomlab {
namespace {
using namespace cuda;

// strided_offset (kernels/broadcast.h) on the device.
__device__ __forceinline__ int64_t offset_at(int64_t i, int ndim, const int64_t* shape, const int64_t* strides) {
  int64_t off = 0;
  for (int d = ndim - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

template <class C> __device__ __forceinline__ C apply(BinaryOp op, C x, C y) {
  switch (op) {
    case BinaryOp::add: return add_rn(x, y);
    case BinaryOp::sub: return sub_rn(x, y);
    case BinaryOp::mul: return mul_rn(x, y);
    case BinaryOp::div: return div_rn(x, y);
  }
  return x;
}

template <class T> __global__ void broadcast_binary_kernel(BroadcastArgs a, int64_t n) {
  T* out = static_cast<T*>(a.out);
  const T* x = static_cast<const T*>(a.a);
  const T* y = static_cast<const T*>(a.b);
  for (int64_t i = gtid(); i < n; i += gstride()) {
    const auto xv = ld(x[offset_at(i, a.ndim, a.shape, a.a_strides)]);
    const auto yv = ld(y[offset_at(i, a.ndim, a.shape, a.b_strides)]);
    out[i] = st<T>(apply(a.op, xv, yv));
  }
}

template <class T> __global__ void sum_to_kernel(T* out, const T* in, SumToPlan p) {
  const int64_t o = blockIdx.x;
  const T* base = in + offset_at(o, p.nk, p.kshape, p.kstride);
  double s = 0.0;
  for (int64_t r = threadIdx.x; r < p.r_n; r += blockDim.x)
    s += double(ld(base[offset_at(r, p.nr, p.rshape, p.rstride)]));
  const double total = block_sum(s);
  if (threadIdx.x == 0) out[o] = st<T>(compute_t<T>(total));
}

template <class T> void broadcast_binary_cuda(const BroadcastArgs& a) {
  int64_t n = 1;
  for (int d = 0; d < a.ndim; ++d) n *= a.shape[d];
  if (n == 0) return;
  const Launch L("broadcast_binary");
  broadcast_binary_kernel<T><<<grid_for(n), kThreads, 0, L.stream>>>(a, n);
  CUDA_LAUNCH_CHECK();
}

template <class T> void sum_to_cuda(const SumToArgs& a) {
  if (a.out_n == 0) return;
  const SumToPlan p = sum_to_plan(a);
  const Launch L("sum_to");
  const int threads = p.r_n >= 256 ? 256 : 32;
  sum_to_kernel<T><<<unsigned(a.out_n), threads, 0, L.stream>>>(static_cast<T*>(a.out), static_cast<const T*>(a.in), p);
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_broadcast_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(broadcast_binary_kernels(), broadcast_binary_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(sum_to_kernels(), sum_to_cuda);
}

}  // namespace oomlab
