// flop_counter.h — counts what a step asks of the GPU as its kernels launch, on any device,
// meta included (where nothing runs but every launch still happens): the arithmetic of the
// matrix-class kernels (GEMM, convolution, fused attention) by kind and dtype, and the
// number of kernel launches of every kind, from shapes alone. The planner's time model
// (experiments/plan/time_model.h) is fitted on these.
// Contracts:
//  * A FlopCounter counts the launches of its own thread while it lives (counters nest: the
//    innermost counts). Every KernelTable::launch adds one launch; a table whose argument
//    struct has kernel_flops (defined next to the struct in kernels/<family>.h, with
//    kernel_matrix_kind) also adds kernel_flops(args, op) under (its kind, the launch's dtype).
//  * Elementwise, normalisation and reduction kernels are bandwidth-bound work: they count
//    as launches only (their bytes are the time model's allocation traffic).
//  * Multiply-add = 2 FLOPs (the convention of vendors' peak figures).
#pragma once
#include <cstdint>
#include <string_view>

#include "engine/core/dtype.h"

namespace oomlab {

// The matrix kernels' kinds: a GEMM (linear, bmm), an NCHW or a channels-last convolution
// (cuDNN runs them through different kernels), the fused attention kernels.
enum class MatrixKind : int { gemm, conv, conv_channels_last, attention };
inline constexpr int kNumMatrixKinds = 4;
const char* matrix_kind_name(MatrixKind k);

class FlopCounter {
 public:
  FlopCounter();
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;
  double flops(DType t) const;                   // every kind
  double flops(MatrixKind k, DType t) const { return by_kind_[int(k)][int(t)]; }
  double total() const;
  int64_t launches() const { return launches_; }
  static FlopCounter* active();   // this thread's innermost counter, or nullptr
  void add(MatrixKind k, DType t, double flops) { by_kind_[int(k)][int(t)] += flops; }
  void add_launch() { ++launches_; }

 private:
  double by_kind_[kNumMatrixKinds][kNumDTypes] = {};
  int64_t launches_ = 0;
  FlopCounter* previous_;
};

// Called by KernelTable::launch: counts the launch (and its FLOPs) in the active counter.
template <class Args> void count_launch(DType t, const Args& args, std::string_view op) {
  FlopCounter* c = FlopCounter::active();
  if (!c) return;
  c->add_launch();
  if constexpr (requires { kernel_flops(args, op); }) c->add(kernel_matrix_kind(args), t, kernel_flops(args, op));
}

}  // namespace oomlab
