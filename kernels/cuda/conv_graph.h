// conv_graph.h — convolutions planned with cuDNN's graph (backend) API (conv_graph.cu), the
// path of cudnn_graph_api() (cuda_settings.h: under cuDNN benchmark and for channels_last by
// default, as measured on an H200 and an H100; OOMLAB_CUDNN_GRAPH=0|1 forces it). Internal to kernels/cuda: conv.cu
// calls it first when it is in effect.
//   conv_graph_run(h, a, t, kind, device, why): runs one convolution of `kind` (0 forward,
//   1 backward data, 2 backward weight; conv.cu's Kind) on a cached execution plan and returns
//   true; returns false, with *why saying what cuDNN answered, when the graph API offers no
//   usable engine for this problem (nothing ran: the caller runs the legacy plan). Errors of
//   the installation (driver, architecture, missing sub-library) and of execution throw as
//   in conv.cu; a workspace that cannot be allocated moves on to an engine with a smaller one.
//   The contract of every output is conv.cu's: overwritten (beta = 0), NCHW / KCRS or NHWC / KRSC.
//   clear_cudnn_graph_plans(): drops the cached plans (clear_cudnn_plan_cache calls it).
#pragma once
#include <cudnn.h>

#include <string>

#include "kernels/conv.h"

namespace oomlab {

// The op name of a convolution kind (0 forward, 1 backward data, 2 backward weight), for
// messages and kernel choices (conv.cu's and this path's).
inline const char* conv_op_name(int kind) {
  return kind == 0 ? "conv2d_forward" : (kind == 1 ? "conv2d_backward_data" : "conv2d_backward_weight");
}

bool conv_graph_run(cudnnHandle_t h, const Conv2dArgs& a, DType t, int kind, int device, std::string* why);
void clear_cudnn_graph_plans();

}  // namespace oomlab
