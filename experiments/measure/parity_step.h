// parity_step.h — `oomlab step`: one SGD step on user-supplied npy data and weights, with
// the loss, logits, gradients and updated state written to a safetensors file (see
// parity_step.cpp for the exact step and the output's keys).
#pragma once
#include <cstdint>
#include <string>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "experiments/plan/model_arch.h"

namespace oomlab {

struct StepRequest {
  std::string model, data_dir, init, out;   // --model, --data-dir, --init FILE.safetensors, --out
  DType dtype = DType::f32;                 // --dtype float32 | float64
  double lr = 0.1;
  int64_t classes = 0;                      // 0: an imported classifier's, else the largest label + 1
  Device device = cpu_device();             // cpu or cuda (meta: a DeviceError, nothing to compare)
  ArchOverrides arch;
};
// Runs the step and writes r.out (atomically); a non-finite loss writes nothing (ValueError).
void run_parity_step(const StepRequest& r);

}  // namespace oomlab
