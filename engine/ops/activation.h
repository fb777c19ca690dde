// activation.h — relu, in-place relu_, dropout.
// Saved for backward: relu saves its output (y > 0 is the mask); relu_ modifies x in
// place (bumps its version) and saves the result — the same memory, so no extra
// activation is kept (the source's "in-place ReLU saves one activation"); dropout saves
// its uint8 keep-mask (1 byte/element, as PyTorch's bool mask).
// Dropout masks come from the Philox generator: element i of a call keeps iff
// uniform(seed, base, i) >= p, scaled by 1/(1-p); independent of threads and device.
#pragma once
#include "engine/core/dispatch.h"
#include "engine/core/rng.h"
#include "engine/core/tensor.h"

namespace oomlab {

Tensor relu(const Tensor& x);
Tensor relu_(Tensor& x);   // in place; returns x (now with a relu grad_fn)
// Masks come from the generator of x's device (rng.h), or from `gen` when given.
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);
inline Tensor dropout(const Tensor& x, double p, bool training, Generator& gen) { return dropout(x, p, training, &gen); }

// ---- kernels ----
struct ReluArgs { const void* x; void* y; const void* dy; void* dx; int64_t n; };  // bwd: dx = dy * (y > 0), x=y
struct DropoutArgs {
  const void* x; void* y; uint8_t* mask; const void* dy; void* dx;
  int64_t n; double p; uint64_t seed, base;
};
KernelTable<ReluArgs>& relu_forward_kernels();
KernelTable<ReluArgs>& relu_backward_kernels();
KernelTable<DropoutArgs>& dropout_forward_kernels();
KernelTable<DropoutArgs>& dropout_backward_kernels();

}  // namespace oomlab
