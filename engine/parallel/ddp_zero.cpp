// ddp_zero.cpp — ZeRO stages 1 and 2 inside DistributedDataParallel's reducer
// (distributed_data_parallel.h): shards of every bucket, buckets that exist only while they
// are reduced, the reduce_scatter into the shard's gradient and the all-gather of the
// updated shards into the parameters.
#include <algorithm>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/elementwise.h"
#include "engine/parallel/distributed_data_parallel.h"

namespace oomlab {

void DistributedDataParallel::make_shards(Device dev) {
  const int64_t world = queue_->world_size(), rank = queue_->rank();
  NoGradGuard no_grad;
  MemoryContext ctx("DistributedDataParallel", "zero_shards");
  for (Bucket& b : buckets_) {
    b.shard = (b.numel + world - 1) / world;
    b.shard_param = Tensor::zeros({b.shard}, b.dtype, dev);   // the last rank's padding stays 0
    copy_flat_range(b, rank * b.shard, b.shard_param, /*into_params=*/false);
  }
}

void DistributedDataParallel::copy_flat_range(const Bucket& b, int64_t begin, const Tensor& flat,
                                              bool into_params) const {
  const int64_t end = begin + flat.numel();
  for (size_t slot = 0; slot < b.params.size(); ++slot) {
    const Tensor p = params_[b.params[slot]].second.detach();
    const int64_t n = p.numel(), lo = std::max(begin, b.offsets[slot]), hi = std::min(end, b.offsets[slot] + n);
    if (lo >= hi) continue;
    Tensor elems = flat.narrow(0, lo - begin, hi - lo);
    if (!into_params) {
      elems.copy_(p.reshape({n}).narrow(0, lo - b.offsets[slot], hi - lo));
    } else if (p.is_contiguous()) {   // a view of the parameter's storage: written in place
      p.reshape({n}).narrow(0, lo - b.offsets[slot], hi - lo).copy_(elems);
    } else {                          // channels_last: through a logical-order copy
      Tensor logical = p.reshape({n});
      logical.narrow(0, lo - b.offsets[slot], hi - lo).copy_(elems);
      Tensor dst = p;
      dst.copy_(logical.reshape(p.shape()));
    }
  }
}

nn::NamedTensors DistributedDataParallel::optimizer_parameters() const {
  if (zero_stage_ == 0) return params_;
  nn::NamedTensors out;
  for (size_t i = 0; i < buckets_.size(); ++i) out.push_back({str_cat("zero.shard", i), buckets_[i].shard_param});
  return out;
}

void DistributedDataParallel::zero_model_grads() {
  if (zero_stage_ == 0) return;
  for (auto& [name, p] : params_) p.set_grad(Tensor());
}

void DistributedDataParallel::fill_zero_bucket(Bucket& b, size_t slot, const Tensor& grad, size_t param) {
  const int64_t world = queue_->world_size(), padded = b.shard * world;
  if (!b.flat.defined()) {
    MemoryContext ctx("DistributedDataParallel", "zero_bucket");
    b.flat = Tensor::empty({padded}, b.dtype, queue_->device());
    if (padded > b.numel) b.flat.narrow(0, b.numel, padded - b.numel).fill_(0);
  }
  const int64_t n = params_[param].second.numel();
  b.flat.narrow(0, b.offsets[slot], n).copy_(grad.reshape({n}));
  if (zero_stage_ == 2) params_[param].second.set_grad(Tensor());   // only the shard's share is kept
}

void DistributedDataParallel::launch_zero(Bucket& b) {
  MemoryContext ctx("DistributedDataParallel", "zero_reduced");
  b.reduced = Tensor::empty({b.shard}, b.dtype, queue_->device());
  Tensor flat = b.flat, reduced = b.reduced;
  b.work = queue_->submit([flat, reduced](Communicator& c) { c.reduce_scatter(flat, reduced, ReduceOp::avg); });
}

void DistributedDataParallel::finish_zero(Bucket& b) {
  Tensor g = b.shard_param.grad();
  if (g.defined()) {
    add_inplace(g, b.reduced);   // stage 2's later micro-batches
  } else {
    b.shard_param.set_grad(b.reduced);
  }
  b.reduced = Tensor();
  b.flat = Tensor();   // the bucket's buffer is freed
  b.work = CommQueue::Work();
}

void DistributedDataParallel::gather_parameters() {
  if (zero_stage_ == 0) return;
  NoGradGuard no_grad;
  MemoryContext ctx("DistributedDataParallel", "zero_gather");
  const int64_t world = queue_->world_size();
  for (Bucket& b : buckets_) {
    Tensor full = Tensor::empty({b.shard * world}, b.dtype, queue_->device());
    queue_->run([&](Communicator& c) { c.all_gather(b.shard_param, full); });
    copy_flat_range(b, 0, full.narrow(0, 0, b.numel), /*into_params=*/true);
  }
}

}  // namespace oomlab
