// register_dense.cpp — registration of the dense CUDA kernel family (placeholder until the
// kernels land; filled in by the CUDA-backend work of issue 3).
namespace oomlab {
void register_dense_cuda_kernels() {}
}  // namespace oomlab
