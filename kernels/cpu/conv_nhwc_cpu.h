// conv_nhwc_cpu.h — the CPU conv2d kernels for channels_last buffers (Conv2dArgs with
// channels_last; kernels/cpu/conv_nhwc_cpu.cpp), called by conv_cpu.cpp's table entries.
#pragma once
#include "kernels/conv.h"

namespace oomlab {

// C (ldc) = op(A) * op(B) + beta * C, row-major, single-threaded: conv_cpu.cpp's tile GEMM
// (its own AVX-512 sgemm where OpenBLAS lacks AVX-512 kernels, else OpenBLAS).
void conv_tile_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                    int64_t ldb, float beta, float* C, int64_t ldc);
void conv_tile_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
                    int64_t ldb, double beta, double* C, int64_t ldc);

void conv2d_forward_nhwc_f32(const Conv2dArgs& a);
void conv2d_forward_nhwc_f64(const Conv2dArgs& a);
void conv2d_backward_data_nhwc_f32(const Conv2dArgs& a);
void conv2d_backward_data_nhwc_f64(const Conv2dArgs& a);
void conv2d_backward_weight_nhwc_f32(const Conv2dArgs& a);
void conv2d_backward_weight_nhwc_f64(const Conv2dArgs& a);

// The bias gradient of channels_last outputs ([N*P*Q, K] rows).
void channel_bias_grad_rows_f32(const ChannelBiasArgs& a);
void channel_bias_grad_rows_f64(const ChannelBiasArgs& a);
template <class T> void channel_bias_grad_rows(const ChannelBiasArgs& a) {
  if constexpr (sizeof(T) == 4) channel_bias_grad_rows_f32(a); else channel_bias_grad_rows_f64(a);
}

template <class T> void conv2d_forward_nhwc(const Conv2dArgs& a) {
  if constexpr (sizeof(T) == 4) conv2d_forward_nhwc_f32(a); else conv2d_forward_nhwc_f64(a);
}
template <class T> void conv2d_backward_data_nhwc(const Conv2dArgs& a) {
  if constexpr (sizeof(T) == 4) conv2d_backward_data_nhwc_f32(a); else conv2d_backward_data_nhwc_f64(a);
}
template <class T> void conv2d_backward_weight_nhwc(const Conv2dArgs& a) {
  if constexpr (sizeof(T) == 4) conv2d_backward_weight_nhwc_f32(a); else conv2d_backward_weight_nhwc_f64(a);
}

}  // namespace oomlab
