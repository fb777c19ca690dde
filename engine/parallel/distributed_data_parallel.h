// distributed_data_parallel.h — torch.nn.parallel.DistributedDataParallel's reducer: one
// model replica per rank, gradients averaged across ranks in buckets during backward.
// Contracts (PyTorch's behaviour; every collective goes through the rank's CommQueue):
//  * Construction verifies that every rank has the same model (parameter count, names,
//    shapes and dtypes: one all_gather of a signature; every rank throws the same
//    ValueError naming the first rank that differs from rank 0, so none hangs), then
//    broadcasts all parameters and buffers from rank 0.
//  * Buckets: the parameters that require grad, in reverse registration order (the order
//    backward produces their gradients), gathered per dtype (PyTorch's
//    _compute_bucket_assignment_by_size: one open bucket per dtype, so a half model's
//    float32 BatchNorm parameters do not cut its float16 buckets) and closed once they hold
//    >= the cap: each dtype's first bucket 1 MiB (dist._DEFAULT_FIRST_BUCKET_BYTES), its
//    others bucket_cap_bytes (25 MiB by default, --bucket-cap); buckets ordered by their
//    first parameter. Each bucket is a flat
//    buffer on the rank's device, allocated once under the frame "DistributedDataParallel/
//    buckets" (DDP's known cost of one extra gradient copy), visible in the device's stats.
//  * prepare_for_backward(sync): sync = false is no_sync() (gradient accumulation's
//    micro-batches but the last): gradients only accumulate locally. With sync, each
//    parameter's grad-ready hook copies its (accumulated) gradient into its bucket; a bucket
//    whose parameters are all ready is all-reduced (avg) on the communication thread as
//    soon as every earlier bucket was launched (buckets go out in order), overlapping the
//    rest of backward.
//  * finalize_backward(): waits for every bucket and copies the averaged values back into
//    the parameters' .grad. A parameter that got no gradient is a ValueError naming it
//    (PyTorch's find_unused_parameters is not supported).
//  * broadcast_buffers(): buffers (BatchNorm running statistics) from rank 0, called before
//    every forward (PyTorch's broadcast_buffers=True).
//  * stats(): synchronised backwards, all-reduce seconds (each bucket's time on the
//    communication thread), exposed seconds (finalize's wait after backward ended) and the
//    share hidden behind backward: 1 - exposed / all-reduce.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/nn/module.h"
#include "engine/parallel/comm_queue.h"

namespace oomlab {

inline constexpr int64_t kDdpDefaultBucketCap = int64_t(25) << 20;
inline constexpr int64_t kDdpFirstBucketCap = int64_t(1) << 20;

struct DdpStats {
  int64_t synced_backwards = 0, buckets_reduced = 0;
  double allreduce_seconds = 0, exposed_seconds = 0;
  double hidden_share() const;   // 1 - exposed / allreduce, in [0, 1]; 0 without all-reduces
  nlohmann::json to_json() const;
};

class DistributedDataParallel {
 public:
  DistributedDataParallel(nn::Module& module, std::shared_ptr<CommQueue> queue,
                          int64_t bucket_cap_bytes = kDdpDefaultBucketCap);
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  void prepare_for_backward(bool sync);
  void finalize_backward();
  void broadcast_buffers();

  CommQueue& queue() { return *queue_; }
  const DdpStats& stats() const { return stats_; }
  // Bucket sizes in bytes, in launch order; parameter names per bucket.
  std::vector<int64_t> bucket_bytes() const;
  std::vector<std::vector<std::string>> bucket_parameters() const;

 private:
  struct Bucket {
    Tensor flat;                             // the bucket's buffer on the device
    std::vector<size_t> params;              // indices into params_
    std::vector<int64_t> offsets;            // element offset of each parameter in flat
    int64_t pending = 0;
    CommQueue::Work work;
  };
  void assign_buckets(Device dev, int64_t bucket_cap_bytes);
  void on_grad_ready(size_t param, Tensor& grad);
  void launch_ready();

  nn::Module& module_;
  std::shared_ptr<CommQueue> queue_;
  std::vector<std::pair<std::string, Tensor>> params_;   // requiring grad, registration order
  std::vector<size_t> bucket_of_;                        // param index -> bucket
  std::vector<Bucket> buckets_;
  std::vector<bool> ready_;                              // param index -> its hook fired this backward
  size_t next_launch_ = 0;
  bool sync_ = false, in_backward_ = false;
  DdpStats stats_;
  std::shared_ptr<bool> alive_;                          // hooks outliving the reducer do nothing
};

}  // namespace oomlab
