// optim_foreach.cu — a parameter group's optimizer updates on CUDA (kernels/optim.h:
// sgd_foreach, adam_foreach), float32, float64 and 16-bit.
//   Multi-tensor launches (issue 31; on the H200 and the H100 they passed the parity rows, and
//   replaced one launch per parameter: kit runs of cbc8729 and aa21f01), as torch.optim's
//   foreach / fused forms:
//     the list is cut by plan_multi_tensor (multi_tensor_plan.h) into launches of at most
//     kListTensors tensors and kListBlocks blocks, a block per chunk of kListChunk elements,
//     the pointers and sizes passed by value in the launch's argument struct (under 4 KiB).
//     Items whose per-call constants differ (Adam's bias corrections of parameters at
//     other steps) go in separate runs. Each element runs sgd_elem / adam_elem with the constants the
//     single-parameter kernel would use, so results are bit-identical to it.
#include <vector>

#include "kernels/cuda/graph_consts.h"
#include "kernels/cuda/multi_tensor_plan.h"
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/optim.h"

namespace oomlab {
namespace {
using namespace cuda;

constexpr int kListTensors = 24;
constexpr int kListBlocks = 320;
constexpr int64_t kListChunk = 65536;

struct BlockMap {   // block b updates chunk `chunk[b]` of the list's tensor `slot[b]`
  unsigned char slot[kListBlocks];
  int32_t chunk[kListBlocks];
  __device__ void range(int64_t n, int64_t& i0, int64_t& i1) const {
    i0 = int64_t(chunk[blockIdx.x]) * kListChunk;
    i1 = i0 + kListChunk < n ? i0 + kListChunk : n;
  }
};
template <class T> struct SgdList {
  T* p[kListTensors];
  const T* g[kListTensors];
  T* buf[kListTensors];
  int64_t n[kListTensors];
  bool first[kListTensors];
  BlockMap map;
};
template <class T> struct AdamList {
  T* p[kListTensors];
  const T* g[kListTensors];
  T* m[kListTensors];
  T* v[kListTensors];
  int64_t n[kListTensors];
  BlockMap map;
};

template <class T, class C = compute_t<T>>
__global__ void sgd_list_kernel(SgdList<T> L, SgdConst<C> k, const SgdConst<C>* kp) {
  if (kp) k = *kp;
  const int s = L.map.slot[blockIdx.x];
  int64_t i0, i1;
  L.map.range(L.n[s], i0, i1);
  T* p = L.p[s];
  const T* g = L.g[s];
  T* buf = L.buf[s];
  k.first = L.first[s];
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) sgd_at(p, g, buf, k, i);
}

template <class T, bool Decay, bool Decoupled, bool LerpLow, class C = compute_t<T>>
__global__ void adam_list_kernel(AdamList<T> L, AdamConst<C> k, const AdamConst<C>* kp) {
  if (kp) k = *kp;
  const int s = L.map.slot[blockIdx.x];
  int64_t i0, i1;
  L.map.range(L.n[s], i0, i1);
  T *p = L.p[s], *m = L.m[s], *v = L.v[s];
  const T* g = L.g[s];
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) adam_at<T, Decay, Decoupled, LerpLow>(p, g, m, v, k, i);
}

// Calls run(first, count) for each maximal run of items `same` calls equal.
template <class Args, class Same, class Run> void for_each_run(const ForeachArgs<Args>& a, Same same, Run run) {
  for (int64_t i = 0, j; i < a.count; i = j) {
    for (j = i + 1; j < a.count && same(a.items[i], a.items[j]); ++j) {}
    run(i, j - i);
  }
}
// Items whose single-parameter kernels would use the same constants (make_sgd_const /
// make_adam_const and the kernel's template flags are functions of these fields).
bool same_sgd(const SgdArgs& x, const SgdArgs& y) {   // first_step may differ: it is per tensor
  return x.lr == y.lr && x.momentum == y.momentum && x.dampening == y.dampening &&
         x.weight_decay == y.weight_decay && x.nesterov == y.nesterov && (x.buf == nullptr) == (y.buf == nullptr);
}
bool same_adam(const AdamArgs& x, const AdamArgs& y) {
  return x.lr == y.lr && x.beta1 == y.beta1 && x.beta2 == y.beta2 && x.eps == y.eps &&
         x.weight_decay == y.weight_decay && x.step_size == y.step_size &&
         x.bias_correction2_sqrt == y.bias_correction2_sqrt && x.decoupled == y.decoupled;
}

// Launches `fill`ed lists over items [first, first + count) of a.
template <class List, class Args, class Fill, class Go>
void launch_lists(const ForeachArgs<Args>& a, int64_t first, int64_t count, Fill fill, Go go) {
  std::vector<int64_t> sizes(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) sizes[size_t(i)] = a.items[first + i].n;
  for (const MultiTensorLaunch& l : plan_multi_tensor(sizes, kListTensors, kListBlocks, kListChunk)) {
    List L{};
    for (size_t s = 0; s < l.tensors.size(); ++s) fill(L, int(s), a.items[first + l.tensors[s]]);
    for (size_t b = 0; b < l.blocks.size(); ++b) {
      L.map.slot[b] = static_cast<unsigned char>(l.blocks[b].slot);
      L.map.chunk[b] = int32_t(l.blocks[b].chunk);
    }
    go(L, unsigned(l.blocks.size()));
  }
}

template <class T> void sgd_foreach_cuda(const SgdForeachArgs& a) {
  using C = compute_t<T>;
  const Launch L("sgd_foreach");
  for_each_run(a, same_sgd, [&](int64_t first, int64_t count) {
    const SgdConst<C> k = make_sgd_const<C>(a.items[first]);   // k.first: per tensor, in the list
    const SgdConst<C>* kp = const_slot(k);
    if (const_mode() == ConstMode::refresh) return;
    launch_lists<SgdList<T>>(a, first, count,
        [](SgdList<T>& l, int s, const SgdArgs& x) {
          l.p[s] = static_cast<T*>(x.param);
          l.g[s] = static_cast<const T*>(x.grad);
          l.buf[s] = static_cast<T*>(x.buf);
          l.n[s] = x.n;
          l.first[s] = x.first_step;
        },
        [&](const SgdList<T>& l, unsigned blocks) {
          sgd_list_kernel<T><<<blocks, kThreads, 0, L.stream>>>(l, k, kp);
          CUDA_LAUNCH_CHECK();
        });
  });
}

template <class T, bool Decay, bool Decoupled, bool LerpLow>
void adam_lists(const AdamForeachArgs& a, int64_t first, int64_t count, const AdamConst<compute_t<T>>& k,
                const AdamConst<compute_t<T>>* kp, cudaStream_t stream) {
  launch_lists<AdamList<T>>(a, first, count,
      [](AdamList<T>& l, int s, const AdamArgs& x) {
        l.p[s] = static_cast<T*>(x.param);
        l.g[s] = static_cast<const T*>(x.grad);
        l.m[s] = static_cast<T*>(x.exp_avg);
        l.v[s] = static_cast<T*>(x.exp_avg_sq);
        l.n[s] = x.n;
      },
      [&](const AdamList<T>& l, unsigned blocks) {
        adam_list_kernel<T, Decay, Decoupled, LerpLow><<<blocks, kThreads, 0, stream>>>(l, k, kp);
        CUDA_LAUNCH_CHECK();
      });
}

template <class T> void adam_foreach_cuda(const AdamForeachArgs& a) {
  using C = compute_t<T>;
  const Launch L("adam_foreach");
  for_each_run(a, same_adam, [&](int64_t first, int64_t count) {
    const AdamArgs& x = a.items[first];
    const AdamConst<C> k = make_adam_const<C>(x);
    const AdamConst<C>* kp = const_slot(k);
    if (const_mode() == ConstMode::refresh) return;
    const bool decay = x.weight_decay != 0, low = (1.0 - x.beta1) < 0.5;
    if (!decay)
      low ? adam_lists<T, false, false, true>(a, first, count, k, kp, L.stream)
          : adam_lists<T, false, false, false>(a, first, count, k, kp, L.stream);
    else if (x.decoupled)
      low ? adam_lists<T, true, true, true>(a, first, count, k, kp, L.stream)
          : adam_lists<T, true, true, false>(a, first, count, k, kp, L.stream);
    else
      low ? adam_lists<T, true, false, true>(a, first, count, k, kp, L.stream)
          : adam_lists<T, true, false, false>(a, first, count, k, kp, L.stream);
  });
}
}  // namespace

void register_optim_foreach_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(sgd_foreach_kernels(), sgd_foreach_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(adam_foreach_kernels(), adam_foreach_cuda);
}

}  // namespace oomlab
