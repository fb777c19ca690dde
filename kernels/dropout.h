// dropout.h — kernel argument struct and tables of the dropout family
// (engine/ops/dropout.h). Element i of a call keeps iff
// uint_to_unit_float(Generator::block(seed, base, i / 4)[i % 4]) >= p (Philox4x32-10,
// rng.h), scaled by 1/(1-p): the mask depends only on (seed, base, i), never on threads or
// the device. Forward writes y and the uint8 keep-mask (mask may be null); backward
// dx = dy * mask / (1-p). CPU kernels: kernels/cpu/dropout_cpu.cpp; CUDA:
// kernels/cuda/dropout.cu.
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

struct DropoutArgs {
  const void* x; void* y; uint8_t* mask; const void* dy; void* dx;
  int64_t n; double p; uint64_t seed, base;
};

OOMLAB_KERNEL_TABLE(dropout_forward, DropoutArgs, "dropout")
OOMLAB_KERNEL_TABLE(dropout_backward, DropoutArgs, "dropout_backward")

}  // namespace oomlab
