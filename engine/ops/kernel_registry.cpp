// kernel_registry.cpp — THE registration point: the only engine file that tests
// OOMLAB_CUDA. Fills kernel tables with CPU kernels and, in CUDA builds, CUDA kernels
// plus the cuda RawMemory factory (kernels/cuda/register_cuda.cpp).
#include <mutex>

#include "engine/core/dispatch.h"

namespace oomlab {
void register_cpu_kernels();
#if OOMLAB_CUDA
void register_cuda_kernels();
#endif

void ensure_kernels_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_cpu_kernels();
#if OOMLAB_CUDA
    register_cuda_kernels();
#endif
  });
}

bool built_with_cuda() {
#if OOMLAB_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace oomlab
