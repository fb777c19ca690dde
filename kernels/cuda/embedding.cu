// embedding.cu — CUDA kernels of the embedding family (kernels/embedding.h), in float32,
// float64, float16, bfloat16. Forward: a gather (ids out of [0, V) give zeros). Backward
// is deterministic and sort-free, with no atomics and no scratch memory: dweight is zeroed,
// then the block of the first position n holding a vocabulary row id sums dout[m, :] over
// all m >= n with ids[m] == id in increasing m (positions compacted per 256-id chunk in
// shared memory) and writes the row once. Float32/float64 accumulate in T in the CPU's
// order, so dweight is bit-identical to kernels/cpu/embedding_cpu.cpp's; half types
// accumulate in float. Cost grows as N^2 / 256 id reads (the first-occurrence scans) plus
// N * H gradient reads. Under cuda_embedding_split() (cuda_settings.h) a block sums one chunk
// of 256 columns (gridDim.y chunks side by side) with eight gradient reads in flight per
// thread: the same adds in the same order. token_inputs: one thread per position on the device, as the CPU
// kernel (a host copy of the ids before it stalled each BERT step; removed after the H200 and
// H100 kit runs of cbc8729 and aa21f01 measured this kernel).
#include <algorithm>


#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/pointwise_math.cuh"
#include "kernels/embedding.h"

namespace oomlab {
namespace {
using namespace cuda;

// ---- embedding ------------------------------------------------------------------------
template <class T>
__global__ void embedding_fwd_kernel(const T* w, const int64_t* ids, T* out, int64_t N, int64_t V, int64_t H) {
  for (int64_t i = gtid(); i < N * H; i += gstride()) {
    const int64_t n = i / H, c = i - n * H, id = ids[n];
    out[i] = (id >= 0 && id < V) ? w[id * H + c] : st<T>(0);
  }
}

constexpr int kEmbThreads = 256;  // 8 warps: one chunk of 256 positions per compaction

// s += the gradient rows pos[0..total) of column c, in that order (add_rn: no contraction).
// Split: eight loads issued before their eight adds, so a thread has eight reads in flight
// instead of one (the same adds in the same order, so the same bits).
template <bool Split, class T>
__device__ __forceinline__ compute_t<T> add_rows(compute_t<T> s, const T* g, const int64_t* pos, int total, int64_t H,
                                                 int64_t c) {
  int q = 0;
  if constexpr (Split) {
    for (; q + 8 <= total; q += 8) {
      T v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = g[pos[q + u] * H + c];
#pragma unroll
      for (int u = 0; u < 8; ++u) s = add_rn(s, ld(v[u]));
    }
  }
  for (; q < total; ++q) s = add_rn(s, ld(g[pos[q] * H + c]));
  return s;
}

// Split (cuda_embedding_split(), issue 31): block (x, y) sums only column chunk y, so the
// chunks of one vocabulary row run on gridDim.y blocks side by side instead of one after another
// in one block (BERT's token types: one id at all 4096 positions, 3 chunks of 768 columns).
template <class T, bool Split>
__global__ void embedding_bwd_kernel(const int64_t* ids, const T* g, T* dw, int64_t N, int64_t V, int64_t H,
                                     int64_t pad) {
  __shared__ int64_t pos[kEmbThreads];
  __shared__ int warp_cnt[kEmbThreads / 32];
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t id = ids[n];
    if (id < 0 || id >= V || id == pad) continue;  // block-uniform
    bool earlier = false;                          // does a position before n hold id?
    for (int64_t m0 = 0; m0 < n && !earlier; m0 += kEmbThreads) {
      const int64_t m = m0 + tid;
      earlier = __syncthreads_or(m < n && ids[m] == id) != 0;
    }
    if (earlier) continue;
    const int64_t c_first = Split ? int64_t(blockIdx.y) * kEmbThreads : 0;
    const int64_t c_end = Split && c_first + kEmbThreads < H ? c_first + kEmbThreads : H;
    for (int64_t c0 = c_first; c0 < c_end; c0 += kEmbThreads) {
      const int64_t c = c0 + tid;
      compute_t<T> s = 0;
      for (int64_t m0 = n; m0 < N; m0 += kEmbThreads) {
        const int64_t m = m0 + tid;
        const bool match = m < N && ids[m] == id;
        const unsigned ballot = __ballot_sync(0xffffffffu, match);
        if (lane == 0) warp_cnt[warp] = __popc(ballot);
        __syncthreads();
        int off = 0, total = 0;
        for (int w = 0; w < kEmbThreads / 32; ++w) {
          off += w < warp ? warp_cnt[w] : 0;
          total += warp_cnt[w];
        }
        if (match) pos[off + __popc(ballot & ((1u << lane) - 1u))] = m;
        __syncthreads();
        if (c < H) s = add_rows<Split>(s, g, pos, total, H, c);
        __syncthreads();
      }
      if (c < H) dw[id * H + c] = st<T>(s);
    }
  }
}

template <class T> void embedding_forward_cuda(const EmbeddingArgs& a) {
  if (a.N * a.H == 0) return;
  const Launch L("embedding");
  embedding_fwd_kernel<T><<<grid_for(a.N * a.H), kThreads, 0, L.stream>>>(static_cast<const T*>(a.weight), a.ids,
                                                                          static_cast<T*>(a.out), a.N, a.V, a.H);
  CUDA_LAUNCH_CHECK();
}
template <class T> void embedding_backward_cuda(const EmbeddingArgs& a) {
  if (a.V * a.H == 0) return;
  const Launch L("embedding_backward");
  CUDA_CHECK(cudaMemsetAsync(a.dweight, 0, size_t(a.V * a.H) * sizeof(T), L.stream));
  if (a.N == 0) return;
  const int blocks = int(std::min<int64_t>(a.N, 16384));
  const auto* g = static_cast<const T*>(a.dout);
  auto* dw = static_cast<T*>(a.dweight);
  if (cuda_embedding_split())
    embedding_bwd_kernel<T, true>
        <<<dim3(unsigned(blocks), unsigned((a.H + kEmbThreads - 1) / kEmbThreads)), kEmbThreads, 0, L.stream>>>(
            a.ids, g, dw, a.N, a.V, a.H, a.padding_idx);
  else
    embedding_bwd_kernel<T, false><<<blocks, kEmbThreads, 0, L.stream>>>(a.ids, g, dw, a.N, a.V, a.H, a.padding_idx);
  CUDA_LAUNCH_CHECK();
}

// ---- token_inputs ---------------------------------------------------------------------
__global__ void token_inputs_kernel(TokenInputsArgs a) {
  for (int64_t i = gtid(); i < a.B * a.T; i += gstride()) {
    if (a.positions) a.positions[i] = i % a.T;
    if (a.types) a.types[i] = 0;
    if (a.padding) a.padding[i] = a.ids[i] == 0 ? 1 : 0;
  }
}
void token_inputs_cuda(const TokenInputsArgs& a) {
  if (a.B * a.T == 0) return;
  const Launch L("token_inputs");
  token_inputs_kernel<<<grid_for(a.B * a.T), kThreads, 0, L.stream>>>(a);
  CUDA_LAUNCH_CHECK();
}
}  // namespace

void register_embedding_cuda_kernels() {
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(embedding_forward_kernels(), embedding_forward_cuda);
  OOMLAB_REGISTER_FLOAT_HALF_CUDA(embedding_backward_kernels(), embedding_backward_cuda);
  set_kernel<&token_inputs_cuda>(token_inputs_kernels(), DeviceType::cuda, DType::i64);
}

}  // namespace oomlab
