// optim.cu — fused optimizer updates on CUDA (kernels/optim.h): sgd_step and
// adam_step (Adam and AdamW), float32, float64 and 16-bit (a half model's parameters and
// state: loaded as float, updated in float, rounded once at the store, as the CPU's 16-bit
// kernels do). One grid-stride launch per parameter, no allocation; the state tensors are
// updated in place.
// Parity: each element runs sgd_elem / adam_elem (pointwise_math.cuh), the CPU kernel's
// arithmetic in its order with the fused multiply-adds GCC forms there, and the per-call
// scalars are rounded to T on the host exactly as the CPU kernel rounds them, so results
// are bit-identical to kernels/cpu/optim_cpu.cpp (sqrt and division are IEEE-rounded).
// Under graph capture the constants go through device memory (graph_consts.h), so a
// replay uses the step's own learning rate and bias corrections.
#include "kernels/optim.h"
#include "kernels/cuda/graph_consts.h"
#include "kernels/cuda/pointwise_math.cuh"

namespace oomlab {
namespace {
using namespace cuda;

// kp (graph_consts.h): the constants in device memory, read instead of k when set (a
// captured launch whose constants each replay refreshes).
template <class T, class C = compute_t<T>>
__global__ void sgd_kernel(T* p, const T* g, T* buf, SgdConst<C> k, const SgdConst<C>* kp, int64_t n) {
  if (kp) k = *kp;
  for (int64_t i = gtid(); i < n; i += gstride()) sgd_at(p, g, buf, k, i);
}

template <class T, bool Decay, bool Decoupled, bool LerpLow, class C = compute_t<T>>
__global__ void adam_kernel(T* p, const T* g, T* m, T* v, AdamConst<C> k, const AdamConst<C>* kp, int64_t n) {
  if (kp) k = *kp;
  for (int64_t i = gtid(); i < n; i += gstride()) adam_at<T, Decay, Decoupled, LerpLow>(p, g, m, v, k, i);
}

template <class T> void sgd_step_cuda(const SgdArgs& a) {
  if (a.n == 0) return;
  const Launch L("sgd_step");
  const SgdConst<compute_t<T>> k = make_sgd_const<compute_t<T>>(a);
  const SgdConst<compute_t<T>>* kp = const_slot(k);
  if (const_mode() == ConstMode::refresh) return;   // the constants are all a replay needs
  sgd_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<T*>(a.param), static_cast<const T*>(a.grad),
                                                          static_cast<T*>(a.buf), k, kp, a.n);
  CUDA_LAUNCH_CHECK();
}

template <class T, bool Decay, bool Decoupled, bool LerpLow>
void launch_adam(const AdamArgs& a, const AdamConst<compute_t<T>>& k, const AdamConst<compute_t<T>>* kp,
                 cudaStream_t stream) {
  adam_kernel<T, Decay, Decoupled, LerpLow>
      <<<grid_for(a.n), kThreads, 0, stream>>>(static_cast<T*>(a.param), static_cast<const T*>(a.grad),
                                               static_cast<T*>(a.exp_avg), static_cast<T*>(a.exp_avg_sq), k, kp, a.n);
}

template <class T> void adam_step_cuda(const AdamArgs& a) {
  if (a.n == 0) return;
  const Launch L("adam_step");
  const AdamConst<compute_t<T>> k = make_adam_const<compute_t<T>>(a);
  const AdamConst<compute_t<T>>* kp = const_slot(k);
  if (const_mode() == ConstMode::refresh) return;   // the constants are all a replay needs
  const bool decay = a.weight_decay != 0, low = (1.0 - a.beta1) < 0.5;
  if (!decay)
    low ? launch_adam<T, false, false, true>(a, k, kp, L.stream)
        : launch_adam<T, false, false, false>(a, k, kp, L.stream);
  else if (a.decoupled)
    low ? launch_adam<T, true, true, true>(a, k, kp, L.stream) : launch_adam<T, true, true, false>(a, k, kp, L.stream);
  else
    low ? launch_adam<T, true, false, true>(a, k, kp, L.stream)
        : launch_adam<T, true, false, false>(a, k, kp, L.stream);
  CUDA_LAUNCH_CHECK();
}
// GradScaler's unscale + inf/NaN check: float compute for 16/32-bit grads (as the CPU
// kernel); any non-finite element stores 1 into *found_inf (a benign race: all store 1).
template <class T> __global__ void unscale_kernel(T* g, float* found_inf, compute_t<T> inv, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) {
    const compute_t<T> v = ld(g[i]);
    if (!isfinite(v)) *found_inf = 1.0f;
    g[i] = st<T>(mul_rn(v, inv));
  }
}
template <class T> void unscale_cuda(const UnscaleArgs& a) {
  if (a.n == 0) return;
  const Launch L("amp_unscale");
  unscale_kernel<T><<<grid_for(a.n), kThreads, 0, L.stream>>>(static_cast<T*>(a.grad), a.found_inf,
                                                             compute_t<T>(float(a.inv_scale)), a.n);
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_optim_cuda_kernels() {
  set_kernel<&unscale_cuda<float>>(amp_unscale_kernels(), DeviceType::cuda, DType::f32);
  set_kernel<&unscale_cuda<double>>(amp_unscale_kernels(), DeviceType::cuda, DType::f64);
  set_kernel<&unscale_cuda<__half>>(amp_unscale_kernels(), DeviceType::cuda, DType::f16);
  set_kernel<&unscale_cuda<__nv_bfloat16>>(amp_unscale_kernels(), DeviceType::cuda, DType::bf16);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(sgd_kernels(), sgd_step_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(adam_kernels(), adam_step_cuda);
}

}  // namespace oomlab
