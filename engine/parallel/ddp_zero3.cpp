// ddp_zero3.cpp — ZeRO stage 3 (FSDP's FULL_SHARD) inside DistributedDataParallel's reducer
// (distributed_data_parallel.h): each module's own parameters form a unit whose storage
// exists only while gathered, module call hooks that gather a unit for its module's forward
// and free it after, and a pre-backward node that gathers it again for backward.
#include <map>
#include <set>

#include "engine/autograd/checkpoint.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/storage_resize.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/distributed_data_parallel.h"

namespace oomlab {

// Units in reverse module order (the order backward produces their gradients): each
// module's own parameters (relative names without a dot), one unit per dtype.
void DistributedDataParallel::assign_units() {
  std::map<const TensorImpl*, size_t> index;
  for (size_t k = 0; k < params_.size(); ++k) index[params_[k].second.impl()] = k;
  std::set<const TensorImpl*> seen;
  const auto modules = module_.named_modules();
  for (auto it = modules.rbegin(); it != modules.rend(); ++it) {
    std::map<std::pair<DType, size_t>, Bucket> by_dtype;   // and by optimizer group
    for (const auto& [name, t] : it->second->named_parameters()) {
      if (name.find('.') != std::string::npos || !index.count(t.impl())) continue;   // a child's, or frozen
      OOMLAB_CHECK(seen.insert(t.impl()).second, "ZeRO stage 3: parameter ", t.name(),
                   " is shared by two modules (tied weights are not supported)");
      OOMLAB_CHECK(t.is_contiguous() || (t.dim() == 4 && t.is_contiguous(MemoryFormat::channels_last)),
                   "ZeRO stage 3: parameter ", t.name(), " is neither contiguous nor channels_last");
      const size_t group = group_of_(params_[index[t.impl()]].first);
      Bucket& b = by_dtype[{t.dtype(), group}];
      b.dtype = t.dtype();
      b.group = group;
      b.params.push_back(index[t.impl()]);
      b.offsets.push_back(b.numel);
      b.numel += t.numel();
    }
    for (auto& [d, b] : by_dtype) {
      for (size_t k : b.params) bucket_of_[k] = buckets_.size();
      units_of_[it->second].push_back(buckets_.size());
      buckets_.push_back(std::move(b));
    }
  }
}

// The parameters become views of their unit's storage (their values are already in the
// shards: make_shards ran), which is then released: a rank holds only its shards.
void DistributedDataParallel::shard_parameter_storage(Device dev) {
  const int64_t world = queue_->world_size();
  MemoryContext ctx("DistributedDataParallel", "zero3_unit");
  for (Bucket& b : buckets_) {
    b.unit = std::make_shared<Storage>(dev, size_t(b.shard * world) * dtype_size(b.dtype), "zero3_unit");
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      TensorImpl* impl = params_[b.params[slot]].second.impl();
      impl->storage = b.unit;
      impl->offset = b.offsets[slot];   // its strides kept: the unit holds it in its memory order
    }
    release_storage(*b.unit);
  }
}

// The unit's storage back and its all-gather submitted (the send buffer stays in the bucket:
// freed by this thread when waited for, at the same point of every step).
void DistributedDataParallel::prefetch_unit(Bucket& b) {
  if (b.unit->data) return;   // gathered, or its gather is under way
  MemoryContext ctx("DistributedDataParallel", "zero3_gather");
  reacquire_storage(*b.unit, "zero3_unit");
  auto impl = std::make_shared<TensorImpl>();   // the whole unit, flat
  impl->storage = b.unit;
  impl->shape = {b.shard * queue_->world_size()};
  impl->strides = {1};
  impl->dtype = b.dtype;
  Tensor full(impl);   // --offload params: the shard from the host
  const Device dev = queue_->device();
  Tensor send = b.param_shard.device() == dev ? b.param_shard : copy_to_device(b.param_shard, dev);
  b.gather_send = send;
  b.gather = queue_->submit([full, send](Communicator& c) mutable {
    c.all_gather(send, full);
    full = Tensor();
    send = Tensor();
  });
}

void DistributedDataParallel::gather_unit(Bucket& b) {
  prefetch_unit(b);
  if (!b.gather.valid()) return;
  b.gather.wait();
  b.gather = CommQueue::Work();
  b.gather_send = Tensor();
}

void DistributedDataParallel::release_unit(Bucket& b) {
  if (b.gather.valid()) gather_unit(b);   // a prefetch under way ends first
  if (!materialized_) release_storage(*b.unit);
}

void DistributedDataParallel::prefetch_next(const nn::Module& m, int direction) {
  const auto it = order_index_.find(&m);
  if (!order_recorded_ || it == order_index_.end()) return;
  const int64_t next = int64_t(it->second) + direction;
  if (next < 0 || next >= int64_t(unit_order_.size())) return;
  for (size_t b : units_of_.at(unit_order_[size_t(next)]))
    if (!(in_backward_ && buckets_[b].pending == 0)) prefetch_unit(buckets_[b]);   // not when its backward is done
}

// A prefetched unit no module used (a conditional forward): released before the step.
void DistributedDataParallel::release_prefetched() {
  if (zero_stage_ != 3 || materialized_) return;
  for (Bucket& b : buckets_)
    if (b.unit->data) release_unit(b);
}

void DistributedDataParallel::materialize_parameters() {
  if (zero_stage_ != 3) return;
  NoGradGuard no_grad;
  materialized_ = true;
  for (Bucket& b : buckets_) gather_unit(b);
}

void DistributedDataParallel::install_module_hooks() {
  std::weak_ptr<bool> weak = alive_;
  auto alive = [weak] {
    const auto a = weak.lock();
    return a && *a;
  };
  nn::ModuleCallHooks h;
  h.before = [this, alive](nn::Module& m) {
    const auto it = units_of_.find(&m);
    if (it == units_of_.end() || !alive()) return;
    for (size_t b : it->second) gather_unit(buckets_[b]);
    if (!order_recorded_ && !order_index_.count(&m)) {   // the first forward: the call order
      order_index_[&m] = unit_order_.size();
      unit_order_.push_back(&m);
    }
    if (!checkpoint_recomputing()) prefetch_next(m, +1);   // (a re-run's next module is done)
  };
  h.after = [this, alive](nn::Module& m, const Tensor& y) -> Tensor {
    const auto it = units_of_.find(&m);
    if (it == units_of_.end() || !alive()) return y;
    // A checkpoint's re-run (in backward) keeps the units: the segment's nodes read them
    // next, and each is released once its gradients are ready.
    if (checkpoint_recomputing()) return y;
    const std::vector<size_t> units = it->second;
    for (size_t b : units) release_unit(buckets_[b]);
    // A checkpointed block's output stays itself (the planner chains blocks by their outputs);
    // its units come back through the re-run's gathers, which backward's first unpack starts.
    if (m.checkpoint_role().segment >= 0) return y;
    if (!y.defined() || !grad_enabled() || !y.requires_grad()) return y;
    // The pre-backward node: when backward reaches this output, the module's units come back.
    const nn::Module* module = &m;
    return attach_grad_fn(y.detach(), "zero3_gather", {y}, [this, alive, units, module]() -> BackwardFn {
      return [this, alive, units, module](const Tensor& g, const std::vector<bool>&) {
        if (alive()) {
          for (size_t b : units) gather_unit(buckets_[b]);
          prefetch_next(*module, -1);   // BACKWARD_PRE: the module before it, next in backward
        }
        return std::vector<Tensor>{g};
      };
    });
  };
  hooks_ = std::make_unique<nn::ModuleCallHooksGuard>(std::move(h));
}

}  // namespace oomlab
