// half_widen.h — how the CPU backend runs float16 and bfloat16 (every family's 16-bit
// kernels, in its own kernels/cpu/<family>_cpu.cpp): each 16-bit input is widened to a
// float32 scratch copy, the family's float32 kernel runs, each 16-bit output is rounded
// back (round to nearest even, dtype.h). "Compute in float32, store in the low type", so
// CI tests the numerics the GPU kernels have (cuBLAS / cuDNN accumulate half types in
// float32). Pointers of other dtypes pass through: BatchNorm's float32 weight, bias and
// statistics with a 16-bit input; LayerNorm's float32 mean / rstd; masks, indices,
// targets. Scratch is host memory outside the caching allocator, so allocation traces
// (and the meta = cpu invariant) are those of the ops, as on a GPU. Thread-count
// independent: the conversions are elementwise and the float32 kernels are.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/device.h"
#include "engine/core/dispatch.h"
#include "engine/core/dtype.h"

namespace oomlab {

// Scratch float32 copies of one call's 16-bit buffers (dtype H); narrow() writes the
// outputs back. Null pointers stay null.
template <DType H> class Widen {
 public:
  const float* in(const void* p, int64_t n) { return p ? widen(p, n) : nullptr; }
  float* inout(void* p, int64_t n) {
    if (!p) return nullptr;
    float* f = widen(p, n);
    outs_.push_back({p, f, n});
    return f;
  }
  float* out(void* p, int64_t n) {
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
    bufs_.push_back(std::make_unique<float[]>(size_t(std::max<int64_t>(n, 1))));
    return bufs_.back().get();
  }
  float* widen(const void* p, int64_t n) {
    float* f = scratch(n);
    low_to_float(H, static_cast<const uint16_t*>(p), f, n);
    return f;
  }
  std::vector<std::unique_ptr<float[]>> bufs_;
  std::vector<Out> outs_;
};

// Runs the float32 kernel of `table` on the widened copy `f`.
template <class Args> void run_f32(KernelTable<Args>& table, const Args& f) {
  table.launch(current_device(), DType::f32, f);   // the cpu:N this 16-bit launch runs on
}

}  // namespace oomlab
