// register_cpu.cpp — fills every op family's kernel table with its CPU kernels.
// Each family's kernels/cpu/<family>_cpu.cpp defines register_<family>_cpu_kernels().
namespace oomlab {

void register_elementwise_cpu_kernels();
void register_copy_cpu_kernels();
void register_matmul_cpu_kernels();
void register_conv_cpu_kernels();
void register_pool_cpu_kernels();
void register_batchnorm_cpu_kernels();
void register_activation_cpu_kernels();
void register_loss_cpu_kernels();
void register_optim_cpu_kernels();
void register_transformer_cpu_kernels();
void register_vision_cpu_kernels();

void register_cpu_kernels() {
  register_elementwise_cpu_kernels();
  register_copy_cpu_kernels();
  // FAMILIES: uncomment as each family lands
  register_matmul_cpu_kernels();
  register_conv_cpu_kernels();
  register_pool_cpu_kernels();
  register_batchnorm_cpu_kernels();
  register_activation_cpu_kernels();
  register_loss_cpu_kernels();
  register_optim_cpu_kernels();
  register_transformer_cpu_kernels();
  register_vision_cpu_kernels();
}

}  // namespace oomlab
