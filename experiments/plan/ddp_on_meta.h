// ddp_on_meta.h — DistributedDataParallel's reducer around a model on the meta device, for
// an estimate of one rank's memory: a one-rank world (LocalCommunicator on meta moves no
// data), the reducer (its gradient buckets, allocated once at construction, are what every
// rank holds besides the single-device step) and its training-step strategy.
// Contracts:
//  * A rank's allocator sees the same buckets at any world size; NCCL's own buffers live
//    outside the caching allocator (the planner's reserve), so the meta peak with this
//    reducer is a CUDA rank's under NCCL.
//  * Construct before the optimizer's first step (the buckets are static memory); keep
//    alive while the step runs.
#pragma once
#include <cstdint>
#include <memory>

#include "engine/core/device.h"
#include "engine/parallel/comm_queue.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/parallel/local_comm.h"
#include "engine/train/ddp_strategy.h"

namespace oomlab {

struct DdpOnMeta {
  DdpOnMeta(nn::Module& model, int64_t bucket_cap)
      : comm(std::make_shared<LocalWorld>(1), 0, meta_device()),
        queue(std::make_shared<CommQueue>(comm)),
        ddp(model, queue, bucket_cap),
        strategy(ddp) {}
  LocalCommunicator comm;
  std::shared_ptr<CommQueue> queue;
  DistributedDataParallel ddp;
  DdpStrategy strategy;
};

}  // namespace oomlab
