// register_cpu.cpp — the CPU backend's registrar: fills every op family's kernel table
// with its CPU kernels (each kernels/cpu/<family>_cpu.cpp defines
// register_<family>_cpu_kernels()) and records the BLAS library in the provenance.
#include <cblas.h>

#include "engine/core/backend.h"
#include "engine/core/dispatch.h"

extern "C" char* openblas_get_config(void);

namespace oomlab {

void register_elementwise_cpu_kernels();
void register_copy_cpu_kernels();
void register_linear_cpu_kernels();
void register_conv_cpu_kernels();
void register_pool_cpu_kernels();
void register_batchnorm_cpu_kernels();
void register_activation_cpu_kernels();
void register_dropout_cpu_kernels();
void register_softmax_cpu_kernels();
void register_loss_cpu_kernels();
void register_layernorm_cpu_kernels();
void register_embedding_cpu_kernels();
void register_upsample_cpu_kernels();
void register_optim_cpu_kernels();

namespace {
void register_cpu_kernels() {
  register_library_info("blas", openblas_get_config());   // starts with "OpenBLAS <version>"
  register_elementwise_cpu_kernels();
  register_copy_cpu_kernels();
  register_linear_cpu_kernels();
  register_conv_cpu_kernels();
  register_pool_cpu_kernels();
  register_batchnorm_cpu_kernels();
  register_activation_cpu_kernels();
  register_dropout_cpu_kernels();
  register_softmax_cpu_kernels();
  register_loss_cpu_kernels();
  register_layernorm_cpu_kernels();
  register_embedding_cpu_kernels();
  register_upsample_cpu_kernels();
  register_optim_cpu_kernels();
}
}  // namespace

OOMLAB_REGISTER_BACKEND("cpu", &register_cpu_kernels);

}  // namespace oomlab
