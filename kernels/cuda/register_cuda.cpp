// register_cuda.cpp — the CUDA backend's registrar, announced with
// OOMLAB_REGISTER_BACKEND("cuda"): registers the cudaMalloc raw memory behind cuda:i
// allocators (cuda_runtime.cpp) and the runtime hooks (cuda_backend.cpp: synchronize,
// properties, numerics options), then fills the op families' kernel tables with their
// CUDA kernels (kernels/cuda/<family>.cu defines register_<family>_cuda_kernels()) and
// registers the nccl communicator. First it checks that the engine is of its own build
// (engine/core/lazy_backend.h: the CLI loads this backend as a library).
// Includes no CUDA header: the registrars are plain functions of the backend library.
#include <memory>

#include "engine/core/dispatch.h"
#include "engine/core/lazy_backend.h"
#include "engine/memory/caching_allocator.h"
#include "oomlab_git.h"   // OOMLAB_BUILD_ID's parts, as the engine's (scripts/git_version.cmake)

namespace oomlab {
namespace cuda {
std::unique_ptr<RawMemory> make_cuda_raw_memory(int device);   // cuda_runtime.cpp
void register_cuda_backend_hooks();                             // cuda_backend.cpp
}  // namespace cuda

void register_elementwise_cuda_kernels();
void register_copy_cuda_kernels();
void register_linear_cuda_kernels();
void register_conv_cuda_kernels();
void register_batchnorm_cuda_kernels();
void register_pool_cuda_kernels();
void register_activation_cuda_kernels();
void register_dropout_cuda_kernels();
void register_attention_cuda_kernels();
void register_softmax_cuda_kernels();
void register_loss_cuda_kernels();
void register_layernorm_cuda_kernels();
void register_groupnorm_cuda_kernels();
void register_embedding_cuda_kernels();
void register_upsample_cuda_kernels();
void register_optim_cuda_kernels();
void register_optim_foreach_cuda_kernels();
void register_collective_cuda_kernels();
void register_broadcast_cuda_kernels();

#ifdef OOMLAB_WITH_NCCL
void register_nccl_communicator();   // nccl_comm.cpp
#endif

namespace {
void register_cuda_kernels() {
  // Loaded as liboomlab_cuda.so into another build's oomlab: refused, nothing registered.
  if (!accept_lazy_backend_build("the CUDA backend", OOMLAB_BUILD_ID)) return;
  register_raw_memory(DeviceType::cuda, &cuda::make_cuda_raw_memory);
  cuda::register_cuda_backend_hooks();
  register_elementwise_cuda_kernels();
  register_broadcast_cuda_kernels();
  register_copy_cuda_kernels();
  register_linear_cuda_kernels();
  register_conv_cuda_kernels();
  register_batchnorm_cuda_kernels();
  register_pool_cuda_kernels();
  register_activation_cuda_kernels();
  register_dropout_cuda_kernels();
  register_attention_cuda_kernels();
  register_softmax_cuda_kernels();
  register_loss_cuda_kernels();
  register_groupnorm_cuda_kernels();
  register_layernorm_cuda_kernels();
  register_embedding_cuda_kernels();
  register_upsample_cuda_kernels();
  register_optim_cuda_kernels();
  register_optim_foreach_cuda_kernels();
  register_collective_cuda_kernels();
#ifdef OOMLAB_WITH_NCCL
  register_nccl_communicator();
#endif
}
}  // namespace

OOMLAB_REGISTER_BACKEND("cuda", &register_cuda_kernels);

}  // namespace oomlab
