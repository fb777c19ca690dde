// cuda_settings.h — process-wide numerics/autotuning switches of the CUDA dense kernels,
// with PyTorch's defaults and names:
//   * matmul TF32 (torch.backends.cuda.matmul.allow_tf32): default false — float32 GEMMs
//     use CUBLAS_COMPUTE_32F (strict fp32); true selects CUBLAS_COMPUTE_32F_FAST_TF32;
//   * cuDNN TF32 (torch.backends.cudnn.allow_tf32): default true — float32 convolutions
//     may use TF32 tensor cores (CUDNN_DEFAULT_MATH); false restricts them to
//     CUDNN_FMA_MATH;
//   * cuDNN benchmark (torch.backends.cudnn.benchmark): default false — algorithms come
//     from cuDNN's heuristics; true runs cudnnFind*AlgorithmEx once per shape (autotune);
//   * cuDNN deterministic (torch.backends.cudnn.deterministic): default false — any
//     algorithm; true keeps only those cuDNN reports deterministic (no atomics: the legacy
//     API's CUDNN_DETERMINISTIC, the graph API's engines without the NONDETERMINISTIC note),
//     so that two runs of one build on one GPU give the same bits (without it, two ResNet-20
//     runs on an H200 differed from their third step: test_cuda_graphs, kit run of cbc8729);
//   * cuDNN workspace limit: the largest workspace (bytes) a convolution algorithm may
//     use; default unlimited (SIZE_MAX). Algorithms over the limit are skipped;
//   * tiled fused attention: default true — float32 fused attention runs the shared-memory
//     tiled kernels (kernels/cuda/attention_tiled.cu: on an H200 they passed the parity rows
//     and took 206.7 ms per BERT-base b24 s384 step against 1377.5 ms, reports/results/gpu/
//     h200-2026-11-26-ab-attention); false runs the correctness-first kernels of
//     kernels/cuda/attention.cu (the reference the kit times beside them);
//   * register-tiled float32 fused attention for head dims of 64 (attention_flash.cu: 4 x 4 /
//     4 x 8 tiles per thread): BERT-base b24 s384 97.9 ms against the tiled kernels' 195.5
//     (H200, kit run of cbc8729); tensor-core fused attention (below): the same in AMP bf16
//     106.6 ms against 198.2;
//   * cuDNN's graph (backend) API for convolutions (conv_graph.cu: engines the legacy _v7
//     queries cannot return, as PyTorch's cuDNN v8 API path; the legacy plan when none is
//     offered): default auto, on under cuDNN benchmark and for channels_last convolutions
//     (conv_graph_rules.h's graph_api_in_effect: it passed the parity rows on the H200 and the
//     H100; with benchmark it was faster and peaked 5.6 GB lower than the legacy Find, on NHWC
//     tensors faster than the legacy heuristics (H100: ResNet-50 bf16 0.87x, TF32 0.98x), on NCHW
//     ones within noise, 0.98-1.01x); set_cudnn_graph_api / OOMLAB_CUDNN_GRAPH=0|1 force it.
// Initial values may be overridden by the environment (read once, at first use):
// OOMLAB_MATMUL_TF32=0|1, OOMLAB_CUDNN_TF32=0|1, OOMLAB_CUDNN_BENCHMARK=0|1, OOMLAB_CUDNN_DETERMINISTIC=0|1,
// OOMLAB_CUDNN_WORKSPACE_LIMIT=<bytes>, OOMLAB_CUDA_TILED_ATTENTION=0|1,
// OOMLAB_CUDNN_GRAPH=0|1, OOMLAB_CUDA_FLASH_ATTENTION=0|1, OOMLAB_CUDA_EMBEDDING_SPLIT=0|1,
// OOMLAB_CUDA_BN_CL_ONE_PASS=0|1, OOMLAB_CUDA_LN_UNROLL=0|1, OOMLAB_CUDA_DROPOUT_VEC=0|1,
// OOMLAB_CUDA_COPY_FASTDIV=0|1, OOMLAB_CUDA_LINEAR_LT=0|1, OOMLAB_CUDA_BIAS_PLANES=0|1,
// OOMLAB_CUDA_MMA_ATTENTION=0|1,
// OOMLAB_CUDA_TC_ATTENTION=0|1 (and OOMLAB_CUDA_OWN_STREAM=0|1,
// the compute stream: cuda_stream.h). Setters are thread-safe (atomics); cached
// convolution plans are keyed by these settings, so a change applies to the next call.
// This header includes no CUDA header: it is plain C++ (compiled only in CUDA builds).
#pragma once
#include <cstddef>
#include <string>

namespace oomlab {

void set_cuda_allow_tf32(bool matmul, bool cudnn);
bool cuda_matmul_allow_tf32();
bool cudnn_allow_tf32();

void set_cudnn_benchmark(bool on);
bool cudnn_benchmark();

void set_cudnn_deterministic(bool on);
bool cudnn_deterministic();

void set_cudnn_workspace_limit(size_t bytes);   // SIZE_MAX = unlimited
size_t cudnn_workspace_limit();

void set_cuda_tiled_attention(bool on);
bool cuda_tiled_attention();

void set_cudnn_graph_api(bool on);
bool cudnn_graph_api(bool channels_last);   // whether a convolution on such tensors uses it
std::string cudnn_graph_api_setting();     // "true", "false" or "channels_last" (auto, no benchmark)
void set_cuda_flash_attention(bool on);
bool cuda_flash_attention();
// Tensor-core fused attention (attention_tc.cu, head dims of 64): TF32 matrix products for
// the float32 copies of 16-bit inputs (exact: float16 and bfloat16 fit TF32). Default on
// (measured in AMP bf16, above). Float32 inputs keep the flash kernels, TF32 or not: with
// them on tensor cores BERT-base b24 s384 took 101.7 ms against 96.1 (H200, afbeb1e).
void set_cuda_tc_attention(bool on);
bool cuda_tc_attention();
// The embedding backward (embedding.cu) with its column chunks on blocks side by side and eight
// gradient reads in flight per thread: the same adds in the same order (bit-identical). Default
// off until a GPU run of the kit measures it (issue 31; BERT's token-type embedding backward
// took 1.25 ms of each H100 step: one block summing 4096 rows of 768 columns).
void set_cuda_embedding_split(bool on);
bool cuda_embedding_split();
// channels_last BatchNorm's training statistics in one read of x (batchnorm_nhwc.cu: the
// shifted sums batchnorm.cu's NCHW kernels use for float32 and 16-bit inputs, measured there)
// instead of a sum pass and a squared-deviation pass. Default off until a GPU run of the kit
// measures it (issue 31; kernels/cuda/check/bn_nhwc_check.cu runs its bodies in CPU CI).
void set_cuda_bn_cl_one_pass(bool on);
bool cuda_bn_cl_one_pass();
// layer_norm's forward and dx kernels with their row loops unrolled 16 times over __restrict__
// data (layernorm.cu): the same operations in the same order (bit-identical), more loads in
// flight. Default off until a GPU run of the kit measures it (issue 31).
void set_cuda_ln_unroll(bool on);
bool cuda_ln_unroll();
// Dropout's forward and backward moving each Philox block's four elements as one vector
// (dropout.cu, dropout_math.cuh): the same arithmetic (bit-identical). Default off until a
// GPU run of the kit measures it (issue 31).
void set_cuda_dropout_vec(bool on);
bool cuda_dropout_vec();
// Strided same-dtype copies (copy.cu) with 32-bit offsets and multiply-high divisions
// (copy_index.cuh) where they fit: the same bytes. Default off until a GPU run of the kit
// measures it (issue 31: BERT's head-layout copies make three int64 divisions an element).
void set_cuda_copy_fastdiv(bool on);
bool cuda_copy_fastdiv();
// linear's bias add, and its bias gradient, in the epilogue of one cuBLASLt matmul (linear_lt.cu:
// CUBLASLT_EPILOGUE_BIAS / BGRADA / BGRADB, as PyTorch's addmm runs the bias) instead of a
// separate pass over the output or the gradient; the unfused path where cuBLASLt offers no
// algorithm. The same sums to rounding, not bit for bit. Default off until a GPU run of the kit
// measures it (issue 31: BERT-base's 74 linears a step, each with a bias pass and a bias-grad
// pass over a [4096, 768..3072] tensor).
void set_cuda_linear_lt(bool on);
bool cuda_linear_lt();
// The NCHW convolution bias add (conv_bias.cu; with --fuse-relu its ReLU too) on a (plane,
// position) grid that reads each plane's bias once, instead of an int64 division and modulo
// per element: the same bits. Default off until a GPU run of the kit measures it (issue 31:
// VGG16 b64 adds a bias to ~3.5 GB of float32 conv outputs a step).
void set_cuda_bias_planes(bool on);
bool cuda_bias_planes();
// Fused attention of 16-bit inputs with head dims of 64 on float16 / bfloat16 tensor cores
// (attention_mma.cu: mma.sync.m16n8k16, scores and probabilities in registers), ahead of the
// TF32 kernels. Default off until a GPU run of the kit measures it (issue 31: with the TF32
// kernels BERT-base b24 s384 bf16 took 108.9 ms a step on an H100, PyTorch SDPA 58.3).
void set_cuda_mma_attention(bool on);
bool cuda_mma_attention();

// Drops the cached convolution plans (descriptors + chosen algorithms, legacy and graph API)
// of every device (defined in conv.cu). The next convolution of each shape selects again.
void clear_cudnn_plan_cache();

}  // namespace oomlab
