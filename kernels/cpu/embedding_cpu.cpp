// embedding_cpu.cpp — CPU kernels of the embedding family (kernels/embedding.h), float32
// and float64: the row gather (OpenMP over rows) and its scatter-add backward, which runs
// over fixed 64-column blocks and adds the output-grad rows in index order, so repeated
// ids accumulate deterministically (no atomics; no dependence on the thread count).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/embedding.h"
#include "kernels/cpu/half_widen.h"

namespace oomlab {
namespace {
constexpr int64_t kParallelMin = 32768;   // elements below which loops stay serial
constexpr int64_t kColBlock = 64;         // columns per task in the column reduction

template <class T> void embedding_forward_cpu(const EmbeddingArgs& a) {
  const T* w = static_cast<const T*>(a.weight);
  T* out = static_cast<T*>(a.out);
  const int64_t H = a.H;
#pragma omp parallel for schedule(static) if (a.N * H > kParallelMin)
  for (int64_t n = 0; n < a.N; ++n) {
    const int64_t id = a.ids[n];
    T* o = out + n * H;
    if (id >= 0 && id < a.V) std::memcpy(o, w + id * H, size_t(H) * sizeof(T));
    else std::memset(static_cast<void*>(o), 0, size_t(H) * sizeof(T));
  }
}

// dweight is overwritten: each column block zeroes its columns of every row, then adds
// the output-grad rows in index order (deterministic duplicates, no atomics).
template <class T> void embedding_backward_cpu(const EmbeddingArgs& a) {
  const T* g = static_cast<const T*>(a.dout);
  T* dw = static_cast<T*>(a.dweight);
  const int64_t H = a.H, V = a.V, N = a.N;
  const int64_t nblocks = (H + kColBlock - 1) / kColBlock;
#pragma omp parallel for schedule(static) if ((N + V) * H > kParallelMin && nblocks > 1)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t c0 = blk * kColBlock, c1 = std::min(H, c0 + kColBlock);
    for (int64_t v = 0; v < V; ++v)
      std::memset(static_cast<void*>(dw + v * H + c0), 0, size_t(c1 - c0) * sizeof(T));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t id = a.ids[n];
      if (id < 0 || id >= V || id == a.padding_idx) continue;
      T* d = dw + id * H;
      const T* gr = g + n * H;
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c) d[c] += gr[c];
    }
  }
}
// ---- float16 / bfloat16 (kernels/cpu/half_widen.h: float32 kernels on widened copies) ----
template <DType H, bool Backward> void embedding_half(const EmbeddingArgs& a) {
  Widen<H> w;
  EmbeddingArgs f = a;
  if (!Backward) {
    f.weight = w.in(a.weight, a.V * a.H);
    f.out = w.out(a.out, a.N * a.H);
    run_f32(embedding_forward_kernels(), f);
  } else {
    f.dout = w.in(a.dout, a.N * a.H);
    f.dweight = w.out(a.dweight, a.V * a.H);
    run_f32(embedding_backward_kernels(), f);
  }
  w.narrow();
}

void token_inputs_cpu(const TokenInputsArgs& a) {
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t t = 0; t < a.T; ++t) {
      const int64_t i = b * a.T + t;
      if (a.positions) a.positions[i] = t;
      if (a.types) a.types[i] = 0;
      if (a.padding) a.padding[i] = a.ids[i] == 0 ? 1 : 0;
    }
}

template <DType H> void register_embedding_half() {
  const DeviceType cpu = DeviceType::cpu;
  set_kernel<&embedding_half<H, false>>(embedding_forward_kernels(), cpu, H);
  set_kernel<&embedding_half<H, true>>(embedding_backward_kernels(), cpu, H);
}
}  // namespace

void register_embedding_cpu_kernels() {
  OOMLAB_REGISTER_FLOAT_CPU(embedding_forward_kernels(), embedding_forward_cpu);
  OOMLAB_REGISTER_FLOAT_CPU(embedding_backward_kernels(), embedding_backward_cpu);
  register_embedding_half<DType::f16>();
  register_embedding_half<DType::bf16>();
  set_kernel<&token_inputs_cpu>(token_inputs_kernels(), DeviceType::cpu, DType::i64);
}

}  // namespace oomlab
