// parity_step.h — `oomlab step`: one SGD step on user-supplied npy data and weights, with
// the loss, logits, gradients and updated state written to a safetensors file (see
// parity_step.cpp for the exact step and the output's keys).
#pragma once
#include <string>
#include <vector>

namespace oomlab {
int cmd_step(const std::vector<std::string>& args);
}  // namespace oomlab
