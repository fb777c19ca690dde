// pool.h — max_pool2d, avg_pool2d (count_include_pad = true, as PyTorch's default) and
// adaptive_avg_pool2d on NCHW, as torch.nn.functional.
// Saved for backward: max_pool2d saves its input x and the argmax indices (int64, same
// shape as the output — as PyTorch's max_pool2d_with_indices); avg pools save nothing
// but shapes.
#pragma once
#include "engine/core/dispatch.h"
#include "engine/core/tensor.h"

namespace oomlab {

struct Pool2dParams { int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h = 0, pad_w = 0; };

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

// ---- kernels ----
struct Pool2dArgs {
  int64_t N, C, H, W, P, Q;
  Pool2dParams p;
  bool adaptive;                    // avg: adaptive bins (PyTorch's start/end formula)
  const void* x; void* y; int64_t* indices;   // forward (indices: max only; flat h*W+w)
  const void* dy; void* dx;                   // backward (dx overwritten)
};
KernelTable<Pool2dArgs>& max_pool2d_forward_kernels();
KernelTable<Pool2dArgs>& max_pool2d_backward_kernels();
KernelTable<Pool2dArgs>& avg_pool2d_forward_kernels();
KernelTable<Pool2dArgs>& avg_pool2d_backward_kernels();

}  // namespace oomlab
