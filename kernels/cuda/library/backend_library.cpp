// backend_library.cpp — the one source of liboomlab_cuda.so, the CUDA backend as the `oomlab`
// CLI loads it at its first CUDA use (engine/core/lazy_backend.h). The library is
// this file plus the whole CUDA kernel archive (CMakeLists.txt); it links cudart, cuBLAS(Lt),
// cuDNN and NCCL but not the engine, whose symbols it takes from the binary that loads it
// (built with ENABLE_EXPORTS). Its kernels register as it loads, through the archive's
// OOMLAB_REGISTER_BACKEND("cuda") announcement (kernels/cuda/register_cuda.cpp), whose
// registrar first refuses a binary of another build. The file holds no code: a shared
// library needs one source of its own.
