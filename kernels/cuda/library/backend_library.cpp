// backend_library.cpp — the one source of liboomlab_cuda.so, the CUDA backend as the `oomlab`
// CLI loads it at its first CUDA use (engine/core/lazy_backend.h). The library is
// this file plus the whole CUDA kernel archive (CMakeLists.txt); it links cudart, cuBLAS(Lt),
// cuDNN and NCCL but not the engine, whose symbols it takes from the binary that loads it
// (built with ENABLE_EXPORTS). Its kernels register as it loads, through the archive's
// OOMLAB_REGISTER_BACKEND("cuda") announcement (kernels/cuda/register_cuda.cpp).
// Contract: loaded only into a binary of the same build (the `oomlab` beside it).
extern "C" const char* oomlab_cuda_backend_library() { return "oomlab CUDA backend"; }
