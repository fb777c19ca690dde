// activation.h — kernel argument structs and tables of the activation family
// (engine/ops/activation.h): relu (relu_ runs it with x == y), sigmoid, gelu, silu,
// hardswish and hardsigmoid, forward
// and backward, on contiguous buffers of n elements; backward kernels overwrite dx.
// CPU kernels: kernels/cpu/activation_cpu.cpp; CUDA: kernels/cuda/activation.cu.
#pragma once
#include <cstdint>

#include "engine/core/dispatch.h"

namespace oomlab {

// forward: y = max(x, 0) (NaN propagates); backward: dx = dy * (y > 0), y the saved output.
struct ReluArgs { const void* x; void* y; const void* dy; void* dx; int64_t n; };
// forward: y = 1 / (1 + exp(-x)); backward: dx = dy * (1 - y) * y (y the saved output).
struct SigmoidArgs { const void* x; void* y; const void* dy; void* dx; int64_t n; };
// y = gelu(x) (erf form, or the tanh approximation); backward dx = dy * gelu'(x).
struct GeluArgs { const void* x; void* y; const void* dy; void* dx; int64_t n; bool tanh_approx; };
// silu (y = x * sigmoid(x)), hardswish (x * relu6(x + 3) / 6) and hardsigmoid
// (relu6(x + 3) / 6), as torch.nn.functional; backward from the saved input x, with
// PyTorch's edges (hardswish: 0 below -3, dy above 3, dy * (x / 3 + 0.5) between;
// hardsigmoid: dy / 6 strictly inside (-3, 3), else 0).
struct ActArgs { const void* x; void* y; const void* dy; void* dx; int64_t n; };
// The residual add and the relu after it in one pass (add_relu_, --fuse-relu): y = relu(a + b)
// (y may be a: in place), bit-identical to the add then relu; backward is relu's.
struct AddReluArgs { const void* a; const void* b; void* y; int64_t n; };

OOMLAB_KERNEL_TABLE(relu_forward, ReluArgs, "relu")
OOMLAB_KERNEL_TABLE(relu_backward, ReluArgs, "relu_backward")
OOMLAB_KERNEL_TABLE(add_relu, AddReluArgs, "add_relu")
OOMLAB_KERNEL_TABLE(sigmoid_forward, SigmoidArgs, "sigmoid")
OOMLAB_KERNEL_TABLE(sigmoid_backward, SigmoidArgs, "sigmoid_backward")
OOMLAB_KERNEL_TABLE(gelu_forward, GeluArgs, "gelu")
OOMLAB_KERNEL_TABLE(gelu_backward, GeluArgs, "gelu_backward")
OOMLAB_KERNEL_TABLE(silu_forward, ActArgs, "silu")
OOMLAB_KERNEL_TABLE(silu_backward, ActArgs, "silu_backward")
OOMLAB_KERNEL_TABLE(hardswish_forward, ActArgs, "hardswish")
OOMLAB_KERNEL_TABLE(hardswish_backward, ActArgs, "hardswish_backward")
OOMLAB_KERNEL_TABLE(hardsigmoid_forward, ActArgs, "hardsigmoid")
OOMLAB_KERNEL_TABLE(hardsigmoid_backward, ActArgs, "hardsigmoid_backward")

}  // namespace oomlab
