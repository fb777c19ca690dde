// conv_taps_cpu.h — NCHW conv2d for small output planes by one GEMM per (tap, output row)
// (kernels/cpu/conv_taps_cpu.cpp; float and double). im2col multiplies every tap of every
// output pixel, the padded ones included: on ResNet's late stages (3x3, pad 1) 56% of the
// products of a 2x2 plane and 31% of a 4x4 plane are with zeros. Here only in-bounds taps
// are multiplied, and with stride 1 the GEMMs read the input in place (no im2col copy).
// conv_cpu.cpp calls these when conv_taps_applies holds, a rule on the shapes and the GEMM
// alone (never the data or the thread count).
// Contracts: the conv2d kernel tables' (kernels/conv.h; outputs overwritten); every output
// element sums its taps in tap order with GEMM work cut by the shapes alone, so results do
// not depend on the thread count.
#pragma once
#include "kernels/conv.h"

namespace oomlab {

// What the tap kernels can run: NCHW, one group, an R x S kernel with R*S > 1, a non-empty
// output plane of at most 64 pixels.
bool conv_taps_supported(const Conv2dArgs& a);
// The share of im2col's products that are with padding (0 to 1).
double conv_padded_share(const Conv2dArgs& a);
// Where they are faster than im2col (the measured rules: conv_taps_cpu.cpp), by the GEMM the
// tiles run on. Supported, and at least a quarter of the products padded, or C*R*S <= 2304
// and with OpenBLAS stride 1, with the own AVX-512 sgemm at least an eighth padded.
bool conv_taps_applies(const Conv2dArgs& a, bool own_avx512_sgemm);

template <class T> void conv_taps_forward(const Conv2dArgs& a);
template <class T> void conv_taps_backward_data(const Conv2dArgs& a);
template <class T> void conv_taps_backward_weight(const Conv2dArgs& a);

}  // namespace oomlab
