// ddp_on_meta.h — DistributedDataParallel's reducer around a model on the meta device, for
// an estimate of one rank's memory: rank 0 of a world of `ranks` (MetaRankCommunicator:
// collectives checked, nothing moved, a ring's bytes counted), the reducer (its buckets;
// with ZeRO its shards, and its buckets only while they are reduced) and its strategy.
// Contracts:
//  * A rank's allocator sees what a real rank's sees; NCCL's own buffers live outside the
//    caching allocator (the planner's reserve), so the meta peak is a CUDA rank's under NCCL.
//  * Construct before the optimizer (it is built on optimizer_parameters()); keep alive
//    while the step runs. comm.stats() counts the bytes this rank sends.
#pragma once
#include <cstdint>
#include <memory>

#include "engine/parallel/comm_queue.h"
#include "engine/parallel/distributed_data_parallel.h"
#include "engine/parallel/meta_comm.h"
#include "engine/train/ddp_strategy.h"

namespace oomlab {

struct DdpOnMeta {
  DdpOnMeta(nn::Module& model, int ranks, int64_t bucket_cap, int zero_stage, bool master_weights,
            ZeroOffload offload = ZeroOffload::none)
      : comm(ranks, 0),
        queue(std::make_shared<CommQueue>(comm)),
        ddp(model, queue, bucket_cap, zero_stage, master_weights, offload),
        strategy(ddp) {}
  MetaRankCommunicator comm;
  std::shared_ptr<CommQueue> queue;
  DistributedDataParallel ddp;
  DdpStrategy strategy;
};

}  // namespace oomlab
