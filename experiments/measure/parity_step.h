// parity_step.h — `oomlab step`: one SGD step on user-supplied npy data and weights, with
// the loss, logits, gradients and updated state written to a safetensors file (see
// parity_step.cpp for the exact step and the output's keys).
#pragma once
#include <cstdint>
#include <string>

#include "engine/core/dtype.h"
#include "experiments/plan/run_spec.h"

namespace oomlab {

// Runs the step of `spec` (model, arch, data_dir, init, lr, num_classes: 0 = an imported
// classifier's, else the largest label + 1; device: cpu or cuda, meta is a DeviceError) in
// `dtype` (float32 | float64) and writes `out` atomically; a non-finite loss writes nothing.
// Returns the batch's size and the loss; prints nothing.
struct ParityStepDone { int64_t batch = 0; double loss = 0; };
ParityStepDone run_parity_step(const RunSpec& spec, const std::string& out, DType dtype);

}  // namespace oomlab
