// sync_batchnorm.h — torch.nn.SyncBatchNorm.convert_sync_batchnorm for oomlab models: every
// BatchNorm2d of a module tree gets an all-reduce, so its training statistics (and the two
// gradient sums of its backward) span all ranks (engine/ops/sync_batchnorm.h).
// Contracts:
//  * convert_sync_batchnorm sets sync_all_reduce on each BatchNorm2d of root.named_modules()
//    (parameters, buffers and state_dict names untouched; type_name() becomes
//    "SyncBatchNorm") and returns how many; a tree without one throws ValueError naming
//    the root's type. Converting again replaces the function.
//  * all_reduce_sum_fn(comm): the function to pass: comm.all_reduce(t, sum), blocking. The
//    communicator must outlive the model's forwards and backwards.
#pragma once
#include <cstdint>

#include "engine/nn/module.h"
#include "engine/ops/sync_batchnorm.h"
#include "engine/parallel/communicator.h"

namespace oomlab {

int64_t convert_sync_batchnorm(nn::Module& root, AllReduceSumFn fn);
AllReduceSumFn all_reduce_sum_fn(Communicator& comm);

}  // namespace oomlab
