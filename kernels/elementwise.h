// elementwise.h — kernel argument structs and tables of the elementwise family
// (engine/ops/elementwise.h): axpby (add, sub, scale, add_scalar, add_), mul, sum, fill, pow.
// Raw contiguous buffers of n elements in the table's dtype; outputs are overwritten (out
// may alias a: the in-place ops pass the same pointer). axpby also exists for int64
// (integer arithmetic with alpha, beta, gamma truncated to int64: counters). CPU kernels:
// kernels/cpu/elementwise_cpu.cpp; CUDA: kernels/cuda/elementwise.cu.
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

// out[i] = alpha * a[i] + beta * b[i] (+ gamma), b may be null (then beta ignored)
struct AxpbyArgs { void* out; const void* a; const void* b; double alpha, beta, gamma; int64_t n; };
// out[i] = a[i] * b[i] * alpha
struct MulArgs { void* out; const void* a; const void* b; double alpha; int64_t n; };
// out = sum(a) * alpha, accumulated in double
struct SumArgs { void* out; const void* a; double alpha; int64_t n; };
// out[i] = value
struct FillArgs { void* out; double value; int64_t n; };
// forward y = x ^ exponent; backward dx = dy * exponent * x ^ (exponent - 1) (0 when
// exponent is 0), as torch.pow(tensor, scalar); reads x (saved), dy; writes dx.
struct PowArgs { const void* x; void* y; const void* dy; void* dx; double exponent; int64_t n; };

OOMLAB_KERNEL_TABLE(axpby, AxpbyArgs, "axpby")
OOMLAB_KERNEL_TABLE(mul, MulArgs, "mul")
OOMLAB_KERNEL_TABLE(sum, SumArgs, "sum")
OOMLAB_KERNEL_TABLE(fill, FillArgs, "fill")
OOMLAB_KERNEL_TABLE(pow_forward, PowArgs, "pow")
OOMLAB_KERNEL_TABLE(pow_backward, PowArgs, "pow_backward")

}  // namespace oomlab
