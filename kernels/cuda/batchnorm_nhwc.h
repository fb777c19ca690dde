// batchnorm_nhwc.h — the CUDA batch_norm kernels for channels_last inputs ([N*H*W, C] rows;
// kernels/cuda/batchnorm_nhwc.cu), called by batchnorm.cu's table entries with the table's dtype.
#pragma once
#include "engine/core/dtype.h"
#include "kernels/batchnorm.h"

namespace oomlab {

void batch_norm_forward_nhwc_cuda(const BatchNormArgs& a, DType t);
void batch_norm_backward_nhwc_cuda(const BatchNormArgs& a, DType t);

}  // namespace oomlab
