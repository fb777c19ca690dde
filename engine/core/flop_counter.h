// flop_counter.h — counts the arithmetic of the matrix-class kernels (GEMM, convolution,
// fused attention) as they launch, on any device, meta included (where nothing runs but
// every launch still happens): the work a step asks of the tensor cores, from shapes alone.
// Contracts:
//  * A FlopCounter counts the launches of its own thread while it lives (counters nest: the
//    innermost counts); each launch adds kernel_flops(args, op) of its table's argument
//    struct (defined next to the struct in kernels/<family>.h) under the launch's dtype.
//  * Only tables whose argument struct has kernel_flops count: elementwise, normalisation
//    and reduction kernels are bandwidth-bound work and are not counted here.
//  * Multiply-add = 2 FLOPs (the convention of vendors' peak figures).
#pragma once
#include <string_view>

#include "engine/core/dtype.h"

namespace oomlab {

class FlopCounter {
 public:
  FlopCounter();
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;
  double flops(DType t) const { return by_dtype_[int(t)]; }
  double total() const;
  static FlopCounter* active();   // this thread's innermost counter, or nullptr
  void add(DType t, double flops) { by_dtype_[int(t)] += flops; }

 private:
  double by_dtype_[kNumDTypes] = {};
  FlopCounter* previous_;
};

// Called by KernelTable::launch: adds the launch's FLOPs to the active counter, if any.
template <class Args> void count_launch_flops(DType t, const Args& args, std::string_view op) {
  if constexpr (requires { kernel_flops(args, op); }) {
    if (FlopCounter* c = FlopCounter::active()) c->add(t, kernel_flops(args, op));
  }
}

}  // namespace oomlab
