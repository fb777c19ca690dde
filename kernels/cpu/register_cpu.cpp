// register_cpu.cpp — the CPU backend's registrar: fills every op family's kernel table
// with its CPU kernels (each kernels/cpu/<family>_cpu.cpp defines
// register_<family>_cpu_kernels()), records the BLAS library in the provenance and
// lets thread budgets (engine/core/thread_budget.h) limit OpenBLAS's threads.
// Denormals: the backend runs with flush-to-zero and denormals-are-zero (PyTorch's
// torch.set_flush_denormal(True)). Subnormal floats appear in training (softmax and GELU
// tails, tiny gradients) and cost OpenBLAS's AVX2 kernels about 250x per operation on the
// CPUs measured (a 256x1024x2048 sgemm: 18 ms normal, 4.2 s with subnormal inputs; a
// bert-mini step 9x slower). The MXCSR bits are per thread and inherited by threads created
// later: they are set in the main thread before main() (so OpenMP's pool, device threads
// and the data loader inherit them), and OpenBLAS's worker threads, started when the
// library loaded, are restarted once so that they inherit them too.
#include <cblas.h>
#include <pmmintrin.h>
#include <xmmintrin.h>

#include "engine/core/backend.h"
#include "engine/core/dispatch.h"
#include "engine/core/thread_budget.h"

extern "C" char* openblas_get_config(void);
extern "C" int blas_thread_shutdown_(void);   // OpenBLAS: stops its thread server; the next threaded call restarts it

namespace oomlab {

void register_elementwise_cpu_kernels();
void register_copy_cpu_kernels();
void register_linear_cpu_kernels();
void register_conv_cpu_kernels();
void register_channel_bias_cpu_kernels();
void register_pool_cpu_kernels();
void register_batchnorm_cpu_kernels();
void register_activation_cpu_kernels();
void register_dropout_cpu_kernels();
void register_attention_cpu_kernels();
void register_softmax_cpu_kernels();
void register_loss_cpu_kernels();
void register_layernorm_cpu_kernels();
void register_groupnorm_cpu_kernels();
void register_embedding_cpu_kernels();
void register_upsample_cpu_kernels();
void register_optim_cpu_kernels();
void register_collective_cpu_kernels();
void register_broadcast_cpu_kernels();

namespace {
void flush_denormals_in_this_thread() {
  _MM_SET_FLUSH_ZERO_MODE(_MM_FLUSH_ZERO_ON);
  _MM_SET_DENORMALS_ZERO_MODE(_MM_DENORMALS_ZERO_ON);
}
[[maybe_unused]] const bool denormals_flushed = (flush_denormals_in_this_thread(), true);

void set_blas_threads(int n) { openblas_set_num_threads(n); }
int get_blas_threads() { return openblas_get_num_threads(); }

void register_cpu_kernels() {
  register_library_info("blas", openblas_get_config());   // starts with "OpenBLAS <version>"
  register_library_info("cpu_denormals", "flush-to-zero, denormals-are-zero");
  flush_denormals_in_this_thread();
  blas_thread_shutdown_();   // its workers restart from a thread that flushes, and inherit it
  register_blas_threads_hook(&set_blas_threads, &get_blas_threads);
  register_elementwise_cpu_kernels();
  register_broadcast_cpu_kernels();
  register_copy_cpu_kernels();
  register_linear_cpu_kernels();
  register_conv_cpu_kernels();
  register_channel_bias_cpu_kernels();
  register_pool_cpu_kernels();
  register_batchnorm_cpu_kernels();
  register_activation_cpu_kernels();
  register_dropout_cpu_kernels();
  register_attention_cpu_kernels();
  register_softmax_cpu_kernels();
  register_loss_cpu_kernels();
  register_layernorm_cpu_kernels();
  register_groupnorm_cpu_kernels();
  register_embedding_cpu_kernels();
  register_upsample_cpu_kernels();
  register_optim_cpu_kernels();
  register_collective_cpu_kernels();
}
}  // namespace

OOMLAB_REGISTER_BACKEND("cpu", &register_cpu_kernels);

}  // namespace oomlab
