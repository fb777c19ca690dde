// dp_on_meta.h — DataParallel / balanced DataParallel (engine/parallel/data_parallel.h) around
// a model on meta:0, its replicas on meta:1..N-1, for an estimate of every device's memory
// and of the work each device's thread does (memory_report.h DpDeviceEstimate).
// Contracts:
//  * The set-up is train_dp's (experiments/train/parallel_train.cpp): replicas built as the
//    module (checkpoint plan, channels-last), device 0 holding the module and the input;
//    `gpu0_bsz` < 0: even chunks (DataParallel), else device 0's samples of the batch.
//  * begin_steady_step(): every device's peak statistics reset and the device threads'
//    work counted from then on; devices(): each device's chunk, peaks since then, and work.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/parallel/data_parallel.h"
#include "experiments/plan/memory_report.h"

namespace oomlab {

struct DpOnMeta {
  // build(d): a replica of the model on meta device d.
  DpOnMeta(nn::ModulePtr model, int64_t devices, int64_t gpu0_bsz, int64_t batch,
           const std::function<nn::ModulePtr(Device)>& build);
  void begin_steady_step();
  std::vector<DpDeviceEstimate> devices() const;
  std::unique_ptr<DataParallel> dp;
  std::vector<int64_t> chunks;   // samples per device at the estimate's batch
};

}  // namespace oomlab
