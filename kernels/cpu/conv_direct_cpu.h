// conv_direct_cpu.h — direct (no im2col) float32 conv2d kernels for small-channel 3x3 convs
// (see conv_direct_cpu.cpp). conv_cpu.cpp calls them when conv_direct_applies(args) holds;
// the choice depends on the shapes alone (never on the thread count or the data).
#pragma once
#include "kernels/conv.h"

namespace oomlab {

// True for float convs this path handles: groups 1, 3x3, pad 1, dilation 1, stride 1 or 2
// (same in both dims), 1 <= C <= 64, 1 <= K <= 64, and the build has AVX2+FMA.
bool conv_direct_applies(const Conv2dArgs& a);
// Same contracts as the conv2d kernel tables (float pointers; outputs overwritten).
void conv_direct_forward(const Conv2dArgs& a);
void conv_direct_backward_data(const Conv2dArgs& a);
void conv_direct_backward_weight(const Conv2dArgs& a);

}  // namespace oomlab
