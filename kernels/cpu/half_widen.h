// half_widen.h — how the CPU backend runs float16 and bfloat16 (every family's 16-bit
// kernels, in its own kernels/cpu/<family>_cpu.cpp): each 16-bit input is widened to a
// float32 scratch copy, the family's float32 kernel runs, each 16-bit output is rounded
// back (round to nearest even, dtype.h). "Compute in float32, store in the low type", so
// CI tests the numerics the GPU kernels have (cuBLAS / cuDNN accumulate half types in
// float32). Pointers of other dtypes pass through: BatchNorm's float32 weight, bias and
// statistics with a 16-bit input; LayerNorm's float32 mean / rstd; masks, indices,
// targets. Scratch is host memory outside the caching allocator, so allocation traces
// (and the meta = cpu invariant) are those of the ops, as on a GPU; it comes from a
// per-thread pool of uninitialised buffers reused across calls (at most kWidenPoolBytes
// kept per thread): fresh zeroed multi-megabyte buffers per call, their memset and page
// faults, were a fifth of a bfloat16 BERT step on the CPU. Thread-count independent: the
// conversions are elementwise and the float32 kernels are.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dispatch.h"
#include "engine/core/dtype.h"

namespace oomlab {

namespace widen_detail {
constexpr int64_t kWidenPoolBytes = int64_t(256) << 20;
struct Buffer { std::unique_ptr<float[]> p; int64_t cap = 0; };
struct Pool { std::vector<Buffer> free; int64_t bytes = 0; };
inline Pool& pool() { thread_local Pool p; return p; }

// The pool's smallest buffer of at least n floats, or a new uninitialised one.
inline Buffer take(int64_t n) {
  Pool& p = pool();
  auto best = p.free.end();
  for (auto it = p.free.begin(); it != p.free.end(); ++it)
    if (it->cap >= n && (best == p.free.end() || it->cap < best->cap)) best = it;
  if (best == p.free.end()) return {std::make_unique_for_overwrite<float[]>(size_t(n)), n};
  Buffer b = std::move(*best);
  p.free.erase(best);
  p.bytes -= b.cap * int64_t(sizeof(float));
  return b;
}

inline void give_back(Buffer b) {   // kept while the pool stays under its limit, else freed
  Pool& p = pool();
  const int64_t bytes = b.cap * int64_t(sizeof(float));
  if (p.bytes + bytes > kWidenPoolBytes) return;
  p.bytes += bytes;
  p.free.push_back(std::move(b));
}
}  // namespace widen_detail

// Scratch float32 copies of one call's 16-bit buffers (dtype H); narrow() writes the
// outputs back. Null pointers stay null.
template <DType H> class Widen {
 public:
  Widen() = default;
  Widen(const Widen&) = delete;
  Widen& operator=(const Widen&) = delete;
  ~Widen() {
    for (widen_detail::Buffer& b : bufs_) widen_detail::give_back(std::move(b));
  }
  const float* in(const void* p, int64_t n) { return p ? widen(p, n) : nullptr; }
  float* inout(void* p, int64_t n) {
    if (!p) return nullptr;
    float* f = widen(p, n);
    outs_.push_back({p, f, n});
    return f;
  }
  // An output the float32 kernel may read before writing: zero-filled, as the scratch was
  // before the pool (a kernel that accumulates into its output sees zeros).
  float* out(void* p, int64_t n) {
    float* f = overwritten_out(p, n);
    if (f) std::fill(f, f + n, 0.0f);
    return f;
  }
  // An output the float32 kernel writes whole without reading (a GEMM with beta 0).
  float* overwritten_out(void* p, int64_t n) {
    if (!p) return nullptr;
    float* f = scratch(n);
    outs_.push_back({p, f, n});
    return f;
  }
  void narrow() {
    for (const Out& o : outs_) {
      float_to_low(H, o.src, static_cast<uint16_t*>(o.dst), o.n);
    }
  }

 private:
  struct Out { void* dst; const float* src; int64_t n; };
  float* scratch(int64_t n) {
    bufs_.push_back(widen_detail::take(std::max<int64_t>(n, 1)));
    return bufs_.back().p.get();
  }
  float* widen(const void* p, int64_t n) {
    float* f = scratch(n);
    low_to_float(H, static_cast<const uint16_t*>(p), f, n);
    return f;
  }
  std::vector<widen_detail::Buffer> bufs_;
  std::vector<Out> outs_;
};

// Runs the float32 kernel of `table` on the widened copy `f`.
template <class Args> void run_f32(KernelTable<Args>& table, const Args& f) {
  table.launch(current_device(), DType::f32, f);   // the cpu:N this 16-bit launch runs on
}

}  // namespace oomlab
