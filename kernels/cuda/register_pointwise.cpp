// register_pointwise.cpp — registration of the pointwise CUDA kernel family (placeholder until the
// kernels land; filled in by the CUDA-backend work of issue 3).
namespace oomlab {
void register_pointwise_cuda_kernels() {}
}  // namespace oomlab
