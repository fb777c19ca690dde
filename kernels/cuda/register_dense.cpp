// register_dense.cpp — registration of the dense CUDA kernel family (issue 3):
//   gemm (cuBLAS; f32, f64, f16, bf16)                         kernels/cuda/gemm_cublas.cpp
//   bias_add_rows / bias_grad_rows, channel_bias_add / _grad   kernels/cuda/bias.cu
//     (f32, f64, f16, bf16)
//   conv2d forward / backward data / backward weight (cuDNN;   kernels/cuda/conv_cudnn.cpp
//     f32, f64, f16, bf16)
//   batch_norm forward / backward (f32, f64)                   kernels/cuda/batchnorm.cu
//   max/avg/adaptive pool2d forward / backward                 kernels/cuda/pool.cu
//     (f32, f64, f16, bf16)
// Numerics switches (TF32, cudnn benchmark, workspace limit): kernels/cuda/cuda_settings.h.
namespace oomlab {
void register_gemm_cuda_kernels();
void register_bias_cuda_kernels();
void register_conv_cuda_kernels();
void register_batchnorm_cuda_kernels();
void register_pool_cuda_kernels();

void register_dense_cuda_kernels() {
  register_gemm_cuda_kernels();
  register_bias_cuda_kernels();
  register_conv_cuda_kernels();
  register_batchnorm_cuda_kernels();
  register_pool_cuda_kernels();
}
}  // namespace oomlab
