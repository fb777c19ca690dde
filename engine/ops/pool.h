// pool.h — max_pool2d, avg_pool2d (count_include_pad = true, as PyTorch's default) and
// adaptive_avg_pool2d on NCHW, as torch.nn.functional.
// Saved for backward: max_pool2d saves its input x and the argmax indices (int64, same
// shape as the output — as PyTorch's max_pool2d_with_indices); avg pools save nothing
// but shapes. Kernels: kernels/pool.h.
#pragma once
#include "engine/core/tensor.h"
#include "kernels/pool.h"   // Pool2dParams

namespace oomlab {

Tensor max_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor avg_pool2d(const Tensor& x, const Pool2dParams& p);
Tensor adaptive_avg_pool2d(const Tensor& x, int64_t out_h, int64_t out_w);

}  // namespace oomlab
