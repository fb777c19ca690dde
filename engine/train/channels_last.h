// channels_last.h — `--channels-last` (PyTorch's model.to(memory_format=torch.channels_last)):
// every 4-D floating parameter and buffer of a model re-laid out as channels_last, in place.
// Contracts:
//  * The tensors keep their identity (layers' handles and names stay valid); each 4-D one
//    gets new memory holding the same logical values in NHWC order (the old is freed), as
//    `param.data = param.data.contiguous(memory_format=channels_last)`. Others are untouched.
//  * conv2d then runs channels_last (its weight is; engine/ops/conv.h), and its output
//    carries the format through batch_norm, relu, the pools and the residual add with no
//    layout copy; the first convolution lays out the NCHW input batch once per step, as a
//    user's `x.to(memory_format=torch.channels_last)` does. Gradients, optimizer state, EMA
//    and DDP buckets follow each parameter's layout; checkpoints hold logical values, so a
//    run saved with or without channels_last resumes either way.
//  * Call it before gradients or optimizer state exist (checked).
//  Returns the number of tensors converted.
#pragma once
#include <cstdint>

#include "engine/nn/module.h"

namespace oomlab {

int64_t channels_last_model(nn::Module& model);

}  // namespace oomlab
