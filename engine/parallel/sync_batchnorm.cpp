// sync_batchnorm.cpp — convert_sync_batchnorm and the communicator's all-reduce as an
// AllReduceSumFn (see sync_batchnorm.h).
#include "engine/parallel/sync_batchnorm.h"

#include "engine/core/error.h"
#include "engine/nn/layers.h"

namespace oomlab {

int64_t convert_sync_batchnorm(nn::Module& root, AllReduceSumFn fn) {
  OOMLAB_CHECK(static_cast<bool>(fn), "convert_sync_batchnorm needs an all-reduce function");
  const std::string root_type = root.type_name();
  int64_t n = 0;
  for (auto& [name, m] : root.named_modules())
    if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m)) {
      bn->sync_all_reduce = fn;
      ++n;
    }
  OOMLAB_CHECK(n > 0, "SyncBatchNorm: the model has no BatchNorm2d layers to synchronise (", root_type,
               " has none; SyncBatchNorm only replaces BatchNorm2d)");
  return n;
}

AllReduceSumFn all_reduce_sum_fn(Communicator& comm) {
  return [&comm](const Tensor& t) { comm.all_reduce(t, ReduceOp::sum); };
}

}  // namespace oomlab
