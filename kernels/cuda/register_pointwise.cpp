// register_pointwise.cpp — registration of the pointwise CUDA kernel family (issue 3): the
// own kernels of kernels/cuda/*.cu other than the dense family (register_dense.cpp) and
// the elementwise / copy entries that cuda_runtime.cpp registers itself.
//   activation_loss.cu  relu, dropout, softmax / log_softmax, nll_loss
//   optim.cu            sgd_step, adam_step
//   transformer.cu      embedding, layer_norm
//   gelu_softmax.cu     gelu, masked_softmax
//   vision.cu           upsample2x, sigmoid, pixel_cross_entropy
namespace oomlab {
void register_activation_loss_cuda_kernels();
void register_optim_cuda_kernels();
void register_transformer_cuda_kernels();
void register_gelu_softmax_cuda_kernels();
void register_vision_cuda_kernels();

void register_pointwise_cuda_kernels() {
  register_activation_loss_cuda_kernels();
  register_optim_cuda_kernels();
  register_transformer_cuda_kernels();
  register_gelu_softmax_cuda_kernels();
  register_vision_cuda_kernels();
}
}  // namespace oomlab
