// batchnorm_rows_cpu.h — the CPU batch_norm kernels for channels_last inputs ([N*H*W, C]
// rows; kernels/cpu/batchnorm_rows_cpu.cpp), called by batchnorm_cpu.cpp's table entries.
#pragma once
#include "kernels/batchnorm.h"

namespace oomlab {

void batch_norm_forward_rows_f32(const BatchNormArgs& a);
void batch_norm_forward_rows_f64(const BatchNormArgs& a);
void batch_norm_backward_rows_f32(const BatchNormArgs& a);
void batch_norm_backward_rows_f64(const BatchNormArgs& a);

template <class T> void batch_norm_forward_rows(const BatchNormArgs& a) {
  if constexpr (sizeof(T) == 4) batch_norm_forward_rows_f32(a); else batch_norm_forward_rows_f64(a);
}
template <class T> void batch_norm_backward_rows(const BatchNormArgs& a) {
  if constexpr (sizeof(T) == 4) batch_norm_backward_rows_f32(a); else batch_norm_backward_rows_f64(a);
}

}  // namespace oomlab
