// cuda_settings.h — process-wide numerics/autotuning switches of the CUDA dense kernels,
// with PyTorch's defaults and names:
//   * matmul TF32 (torch.backends.cuda.matmul.allow_tf32): default false — float32 GEMMs
//     use CUBLAS_COMPUTE_32F (strict fp32); true selects CUBLAS_COMPUTE_32F_FAST_TF32;
//   * cuDNN TF32 (torch.backends.cudnn.allow_tf32): default true — float32 convolutions
//     may use TF32 tensor cores (CUDNN_DEFAULT_MATH); false restricts them to
//     CUDNN_FMA_MATH;
//   * cuDNN benchmark (torch.backends.cudnn.benchmark): default false — algorithms come
//     from cuDNN's heuristics; true runs cudnnFind*AlgorithmEx once per shape (autotune);
//   * cuDNN workspace limit: the largest workspace (bytes) a convolution algorithm may
//     use; default unlimited (SIZE_MAX). Algorithms over the limit are skipped;
//   * tiled fused attention: default true — float32 fused attention runs the shared-memory
//     tiled kernels (kernels/cuda/attention_tiled.cu: on an H200 they passed the parity rows
//     and took 206.7 ms per BERT-base b24 s384 step against 1377.5 ms, reports/results/gpu/
//     h200-2026-11-26-ab-attention); false runs the correctness-first kernels of
//     kernels/cuda/attention.cu (the reference the kit times beside them);
//   * paths of issue 31 not yet run on a GPU, each default false (the measured path) until
//     the kit's parity suite and A/B (scripts/gpu_run.sh, tags *_next) show them correct
//     and faster: vectorized elementwise (16-byte loads and stores in the pointwise maps,
//     vector_map.cuh, and nll's backward in loss.cu; results bit-identical) and one-pass BatchNorm training statistics
//     (batchnorm.cu, bn_math.cuh: two reads of x instead of three; within 1 float32 ulp),
//     foreach optimizer steps (optim_foreach.cu: multi-tensor launches per parameter group
//     instead of one launch per parameter; bit-identical), and convolutions planned with
//     cuDNN's graph (backend) API heuristics (conv_graph.cu: engines the legacy _v7 queries
//     cannot return, as PyTorch's cuDNN v8 API path; the legacy plan when none is offered),
//     and register-tiled float32 fused attention for head dims of 64 (attention_flash.cu:
//     score and output tiles as small matrix products, 4 x 4 / 4 x 8 per thread), and BERT's
//     per-batch positions, token types and padding mask made by one device kernel
//     (embedding.cu token_inputs) instead of from a host copy of the ids (a stall every
//     step; under graph capture the device kernel runs whatever the switch says).
// Initial values may be overridden by the environment (read once, at first use):
// OOMLAB_MATMUL_TF32=0|1, OOMLAB_CUDNN_TF32=0|1, OOMLAB_CUDNN_BENCHMARK=0|1,
// OOMLAB_CUDNN_WORKSPACE_LIMIT=<bytes>, OOMLAB_CUDA_TILED_ATTENTION=0|1,
// OOMLAB_CUDA_VECTORIZED=0|1, OOMLAB_CUDA_BN_ONE_PASS=0|1, OOMLAB_CUDA_FOREACH=0|1,
// OOMLAB_CUDNN_GRAPH=0|1, OOMLAB_CUDA_FLASH_ATTENTION=0|1, OOMLAB_CUDA_TOKEN_INPUTS=0|1,
// OOMLAB_CUDA_TC_ATTENTION=0|1 (and OOMLAB_CUDA_OWN_STREAM=0|1,
// the compute stream: cuda_stream.h). Setters are thread-safe (atomics); cached
// convolution plans are keyed by these settings, so a change applies to the next call.
// This header includes no CUDA header: it is plain C++ (compiled only in CUDA builds).
#pragma once
#include <cstddef>

namespace oomlab {

void set_cuda_allow_tf32(bool matmul, bool cudnn);
bool cuda_matmul_allow_tf32();
bool cudnn_allow_tf32();

void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();

void set_cudnn_workspace_limit(size_t bytes);   // SIZE_MAX = unlimited
size_t cudnn_workspace_limit();

void set_cuda_tiled_attention(bool on);
bool cuda_tiled_attention();

void set_cuda_vectorized(bool on);
bool cuda_vectorized();
void set_cuda_bn_one_pass(bool on);
bool cuda_bn_one_pass();
void set_cuda_foreach(bool on);
bool cuda_foreach();
void set_cudnn_graph_api(bool on);
bool cudnn_graph_api();
void set_cuda_flash_attention(bool on);
bool cuda_flash_attention();
void set_cuda_token_inputs_on_device(bool on);
bool cuda_token_inputs_on_device();
// Tensor-core fused attention (attention_tc.cu, head dims of 64): TF32 matrix products for
// the float32 copies of 16-bit inputs (exact: float16 and bfloat16 fit TF32), and for float32
// inputs when cuda_matmul_allow_tf32(). Default off until a GPU run measures it.
void set_cuda_tc_attention(bool on);
bool cuda_tc_attention();

// Drops the cached convolution plans (descriptors + chosen algorithms, legacy and graph API)
// of every device (defined in conv.cu). The next convolution of each shape selects again.
void clear_cudnn_plan_cache();

}  // namespace oomlab
