// collective.cu — CUDA kernels of the collective family (kernels/collective.h): the element
// loops of the thread-rank communicator's reduction steps and avg's division, on the rank's
// logical device and its compute stream. Each element is one IEEE operation (add, compare,
// divide) in the type the CPU kernel uses (float for 16-bit storage, rounded back as
// dtype.h does), so results equal kernels/cpu/collective_cpu.cpp bit for bit, except where
// the CPU flushes a subnormal (its FTZ/DAZ arithmetic mode).
#include "kernels/collective.h"
#include "kernels/cuda/launch_utils.cuh"

namespace oomlab {
namespace {
using namespace cuda;

template <class C> __device__ __forceinline__ C pair(PairOp op, C a, C b) {
  if (op == PairOp::max) return (a != a || a >= b) ? a : b;   // NaN wins, a's first
  return a + b;
}

template <class T> __global__ void reduce_pair_kernel(T* d, const T* a, const T* b, int64_t n, PairOp op) {
  for (int64_t i = gtid(); i < n; i += gstride()) d[i] = st<T>(pair<compute_t<T>>(op, ld(a[i]), ld(b[i])));
}
__global__ void reduce_pair_i64_kernel(long long* d, const long long* a, const long long* b, int64_t n, PairOp op) {
  for (int64_t i = gtid(); i < n; i += gstride()) d[i] = op == PairOp::max ? (a[i] >= b[i] ? a[i] : b[i]) : a[i] + b[i];
}

template <class T> __global__ void divide_count_kernel(T* p, int64_t n, int64_t count) {
  const compute_t<T> c = compute_t<T>(count);
  for (int64_t i = gtid(); i < n; i += gstride()) p[i] = st<T>(ld(p[i]) / c);
}
__global__ void divide_count_i64_kernel(long long* p, int64_t n, long long count) {
  for (int64_t i = gtid(); i < n; i += gstride()) p[i] /= count;
}

template <class T> void reduce_pair_cuda(const ReducePairArgs& r) {
  if (r.n == 0) return;
  const Launch L("reduce_pair");
  reduce_pair_kernel<T><<<grid_for(r.n), kThreads, 0, L.stream>>>(static_cast<T*>(r.dst), static_cast<const T*>(r.a),
                                                                   static_cast<const T*>(r.b), r.n, r.op);
  CUDA_LAUNCH_CHECK();
}
void reduce_pair_i64_cuda(const ReducePairArgs& r) {
  if (r.n == 0) return;
  const Launch L("reduce_pair");
  reduce_pair_i64_kernel<<<grid_for(r.n), kThreads, 0, L.stream>>>(static_cast<long long*>(r.dst),
                                                                   static_cast<const long long*>(r.a),
                                                                   static_cast<const long long*>(r.b), r.n, r.op);
  CUDA_LAUNCH_CHECK();
}
template <class T> void divide_count_cuda(const DivideCountArgs& a) {
  if (a.n == 0) return;
  const Launch L("divide_count");
  divide_count_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<T*>(a.p), a.n, a.count);
  CUDA_LAUNCH_CHECK();
}
void divide_count_i64_cuda(const DivideCountArgs& a) {
  if (a.n == 0) return;
  const Launch L("divide_count");
  divide_count_i64_kernel<<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<long long*>(a.p), a.n, a.count);
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_collective_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(reduce_pair_kernels(), reduce_pair_cuda);
  set_kernel<&reduce_pair_i64_cuda>(reduce_pair_kernels(), DeviceType::cuda, DType::i64);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(divide_count_kernels(), divide_count_cuda);
  set_kernel<&divide_count_i64_cuda>(divide_count_kernels(), DeviceType::cuda, DType::i64);
}

}  // namespace oomlab
