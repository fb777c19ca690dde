// conv_threads.h — the OpenMP thread count of the NCHW CPU conv kernels' regions (im2col,
// direct 3x3 and tap paths alike): one thread below 4 MFLOP of work (an OpenMP region costs
// more than it saves there) or inside another parallel region (no nesting), else OpenMP's
// maximum. Results never depend on it: every path cuts its work by the shapes alone.
#pragma once
#include <omp.h>

namespace oomlab {

inline int conv_omp_threads(double flops) {
  constexpr double kParallelFlops = 4e6;
  return omp_in_parallel() || flops < kParallelFlops ? 1 : omp_get_max_threads();
}

}  // namespace oomlab
