// distributed_data_parallel.cpp — DDP's reducer (distributed_data_parallel.h).
#include "engine/parallel/distributed_data_parallel.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

namespace oomlab {
namespace {
uint64_t fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char c : s) { h ^= c; h *= 1099511628211ull; }
  return h;
}

// count, elements, hash of (name, shape, dtype) of every parameter, in order.
std::vector<int64_t> model_signature(const nn::NamedTensors& params) {
  uint64_t h = 1469598103934665603ull;
  int64_t numel = 0;
  for (const auto& [name, t] : params) {
    h = fnv1a(h, str_cat(name, ":", shape_str(t.shape()), ":", dtype_name(t.dtype()), ";"));
    numel += t.numel();
  }
  return {int64_t(params.size()), numel, int64_t(h & 0x7fffffffffffffffull)};
}

std::string describe(const std::vector<int64_t>& sig) {
  return str_cat(sig[0], " parameters of ", sig[1], " elements (layout hash ", sig[2], ")");
}
}  // namespace

double DdpStats::hidden_share() const {
  if (allreduce_seconds <= 0) return 0.0;
  return std::clamp(1.0 - exposed_seconds / allreduce_seconds, 0.0, 1.0);
}

nlohmann::json DdpStats::to_json() const {
  return {{"synced_backwards", synced_backwards}, {"buckets_reduced", buckets_reduced},
          {"allreduce_seconds", allreduce_seconds}, {"exposed_seconds", exposed_seconds},
          {"hidden_share", hidden_share()}};
}

// PyTorch's _compute_bucket_assignment_by_size: the parameters in backward's order, one
// open bucket per dtype, each closed once it holds >= its limit (that dtype's first bucket
// 1 MiB, its later ones the cap); the buckets ordered by their first parameter, their
// buffers allocated in that order.
void DistributedDataParallel::assign_buckets(Device dev, int64_t bucket_cap_bytes) {
  struct Open {
    Bucket bucket;
    int64_t bytes = 0, numel = 0;
    bool first = true;
    size_t position = 0;   // of its first parameter in backward's order
  };
  struct Closed {
    size_t position;
    DType dtype;
    int64_t numel;
    Bucket bucket;
  };
  // one open bucket per dtype (and, with ZeRO, per optimizer group: a shard has one group)
  std::map<std::pair<DType, size_t>, Open> open;
  std::vector<Closed> closed;
  auto close = [&](DType d, Open& o) {
    closed.push_back({o.position, d, o.numel, std::move(o.bucket)});
    o = Open();
    o.first = false;   // this dtype's later buckets take the cap
  };
  size_t position = 0;
  for (size_t k = params_.size(); k-- > 0; ++position) {
    const Tensor& t = params_[k].second;
    const size_t group = zero_stage_ > 0 ? group_of_(params_[k].first) : 0;
    Open& o = open[{t.dtype(), group}];
    o.bucket.group = group;
    if (o.bucket.params.empty()) o.position = position;
    o.bucket.params.push_back(k);
    o.bucket.offsets.push_back(o.numel);
    o.numel += t.numel();
    o.bytes += t.numel() * int64_t(dtype_size(t.dtype()));
    if (o.bytes >= (o.first ? std::min(kDdpFirstBucketCap, bucket_cap_bytes) : bucket_cap_bytes)) close(t.dtype(), o);
  }
  for (auto& [key, o] : open)
    if (!o.bucket.params.empty()) close(key.first, o);
  std::sort(closed.begin(), closed.end(), [](const Closed& a, const Closed& b) { return a.position < b.position; });
  MemoryContext ctx("DistributedDataParallel", "buckets");
  for (Closed& c : closed) {
    c.bucket.numel = c.numel;
    c.bucket.dtype = c.dtype;
    if (zero_stage_ == 0) c.bucket.flat = Tensor::zeros({c.numel}, c.dtype, dev);   // ZeRO: while reduced
    for (size_t k : c.bucket.params) bucket_of_[k] = buckets_.size();
    buckets_.push_back(std::move(c.bucket));
  }
}

DistributedDataParallel::DistributedDataParallel(nn::Module& module, std::shared_ptr<CommQueue> queue,
                                                 int64_t bucket_cap_bytes, int zero_stage, bool master_weights,
                                                 ZeroOffload offload, ZeroGroupOf group_of)
    : module_(module),
      queue_(std::move(queue)),
      zero_stage_(zero_stage),
      offload_(offload),
      group_of_(group_of ? std::move(group_of) : ZeroGroupOf([](const std::string&) { return size_t(0); })),
      alive_(std::make_shared<bool>(true)) {
  OOMLAB_CHECK(offload == ZeroOffload::none || zero_stage > 0, "DistributedDataParallel: --offload ",
               zero_offload_name(offload), " needs a ZeRO stage (--zero 1|2|3): it offloads the shards");
  OOMLAB_CHECK(offload != ZeroOffload::params || zero_stage == 3, "DistributedDataParallel: --offload params needs "
               "--zero 3 (only stage 3 shards the parameters)");
  OOMLAB_CHECK(queue_ != nullptr, "DistributedDataParallel: no communicator");
  OOMLAB_CHECK(zero_stage >= 0 && zero_stage <= 3, "DistributedDataParallel: ZeRO stage ", zero_stage,
               " is not one of 0 (DDP), 1 (optimizer state sharded), 2 (and gradients), 3 (and parameters)");
  OOMLAB_CHECK(bucket_cap_bytes >= 1, "DistributedDataParallel: the bucket capacity must be >= 1 byte (got ",
               bucket_cap_bytes, ")");
  const Device dev = queue_->device();
  const nn::NamedTensors all_params = module_.named_parameters();
  for (const auto& [name, t] : module_.state_dict())
    OOMLAB_CHECK_T(DeviceError, t.device() == dev, "DistributedDataParallel: ", name, " is on ", t.device().str(),
                   ", this rank's device is ", dev.str());

  // 1. The same model on every rank (values are not compared: rank 0's are broadcast next).
  const int world = queue_->world_size();
  if (!dev.is_meta()) {
    const std::vector<int64_t> mine = model_signature(all_params);
    Tensor host = Tensor::empty({3}, DType::i64, cpu_device());
    std::copy(mine.begin(), mine.end(), host.data<int64_t>());
    Tensor send = Tensor::empty({3}, DType::i64, dev), all = Tensor::empty({3 * world}, DType::i64, dev);
    send.copy_(host);
    queue_->run([&](Communicator& c) { c.all_gather(send, all); });
    Tensor all_host = Tensor::empty({3 * world}, DType::i64, cpu_device());
    all_host.copy_(all);
    const int64_t* a = all_host.data<int64_t>();
    for (int r = 1; r < world; ++r) {
      const std::vector<int64_t> theirs(a + 3 * r, a + 3 * r + 3), first(a, a + 3);
      OOMLAB_CHECK(theirs == first, "DistributedDataParallel: rank ", r, "'s model differs from rank 0's: ",
                   describe(theirs), " vs ", describe(first), " (every rank must build the same model)");
    }
  }
  // 2. Rank 0's parameters and buffers everywhere.
  queue_->run([&](Communicator& c) {
    for (const auto& [name, t] : module_.state_dict()) c.broadcast(t, 0);
  });

  // 3. Buckets over the parameters that require grad, last registered first.
  for (const auto& p : all_params)
    if (p.second.requires_grad()) params_.push_back(p);
  bucket_of_.assign(params_.size(), 0);
  if (zero_stage_ == 3) {
    assign_units();
  } else {
    assign_buckets(dev, bucket_cap_bytes);
  }
  OOMLAB_CHECK(!master_weights || zero_stage_ > 0, "DistributedDataParallel: master_weights are ZeRO's sharded "
               "masters (zero_stage 1 or 2); plain DDP leaves them to the trainer");
  if (zero_stage_ > 0) make_shards(dev, master_weights);
  if (zero_stage_ == 3) {
    shard_parameter_storage(dev);
    install_module_hooks();
  }
  // 4. Grad-ready hooks.
  for (size_t k = 0; k < params_.size(); ++k) {
    std::weak_ptr<bool> alive = alive_;
    params_[k].second.register_grad_ready_hook([this, k, alive](Tensor& g) {
      if (auto a = alive.lock(); a && *a) on_grad_ready(k, g);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  hooks_.reset();   // ZeRO-3's module hooks leave this thread first
  *alive_ = false;
  for (Bucket& b : buckets_)   // never leave work reading a freed bucket
    if (b.work.valid()) try { b.work.wait(); } catch (...) {}
}

std::vector<int64_t> DistributedDataParallel::bucket_bytes() const {
  std::vector<int64_t> out;
  for (const Bucket& b : buckets_) out.push_back(b.numel * int64_t(dtype_size(b.dtype)));
  return out;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameters() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t k : b.params) out.back().push_back(params_[k].first);
  }
  return out;
}

void DistributedDataParallel::prepare_for_backward(bool sync) {
  for (Bucket& b : buckets_) {   // a previous backward that failed half-way leaves nothing pending
    if (b.work.valid()) try { b.work.wait(); } catch (...) {}
    b.work = CommQueue::Work();
    b.pending = int64_t(b.params.size());
  }
  ready_.assign(params_.size(), false);
  next_launch_ = 0;
  sync_ = sync || zero_stage_ >= 2;   // stages 2 and 3 keep no full gradient between micro-batches
  in_backward_ = true;
  order_recorded_ = true;   // ZeRO-3: the first forward's call order is known (prefetch)
}

void DistributedDataParallel::on_grad_ready(size_t k, Tensor& grad) {
  if (!in_backward_ || !sync_) return;   // no_sync: the gradient stays local
  Bucket& b = buckets_[bucket_of_[k]];
  if (ready_[k]) return;   // once per backward
  ready_[k] = true;
  const size_t slot = size_t(std::find(b.params.begin(), b.params.end(), k) - b.params.begin());
  const Tensor& p = params_[k].second;
  if (zero_stage_ > 0) {
    fill_zero_bucket(b, slot, grad, k);
  } else {
    Tensor view = b.flat.narrow(0, b.offsets[slot], p.numel());
    view.copy_(grad.reshape({p.numel()}));
  }
  if (--b.pending == 0) {
    if (zero_stage_ == 3) release_unit(b);   // its backward is done with the gathered parameters
    launch_ready();
  }
}

void DistributedDataParallel::launch_ready() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    if (zero_stage_ > 0) {
      // At most two buckets live: the previous one is finished (and freed) first, at the
      // same point of every backward (a deterministic trace, meta's as a GPU's).
      if (next_launch_ > 0 && buckets_[next_launch_ - 1].work.valid()) {
        Bucket& prev = buckets_[next_launch_ - 1];
        prev.work.wait();
        stats_.allreduce_seconds += prev.work.seconds();
        finish_zero(prev);
      }
      launch_zero(buckets_[next_launch_]);
    } else {
      Tensor flat = buckets_[next_launch_].flat;
      buckets_[next_launch_].work = queue_->submit([flat](Communicator& c) { c.all_reduce(flat, ReduceOp::avg); });
    }
    ++next_launch_;
  }
}

void DistributedDataParallel::finalize_backward() {
  if (!in_backward_) return;
  in_backward_ = false;
  release_prefetched();
  if (!sync_) return;
  for (const Bucket& b : buckets_)
    if (b.pending > 0)
      for (size_t k : b.params)
        OOMLAB_CHECK(ready_[k], "DistributedDataParallel: parameter ", params_[k].first,
                     " received no gradient in this backward (every parameter must take part in the loss; "
                     "find_unused_parameters is not supported)");
  launch_ready();
  const auto t0 = std::chrono::steady_clock::now();
  double reduce_s = 0;
  for (Bucket& b : buckets_) {
    if (!b.work.valid()) continue;   // ZeRO: finished when the next bucket was launched
    b.work.wait();
    reduce_s += b.work.seconds();
  }
  stats_.exposed_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats_.allreduce_seconds += reduce_s;
  stats_.buckets_reduced += int64_t(buckets_.size());
  ++stats_.synced_backwards;
  if (zero_stage_ > 0) {
    for (Bucket& b : buckets_)
      if (b.reduced.defined()) finish_zero(b);
    return;
  }
  MemoryContext ctx("DistributedDataParallel", "copy_grads");
  for (Bucket& b : buckets_) {
    for (size_t slot = 0; slot < b.params.size(); ++slot) {
      Tensor g = params_[b.params[slot]].second.grad();
      g.copy_(b.flat.narrow(0, b.offsets[slot], g.numel()).reshape(g.shape()));
    }
    b.work = CommQueue::Work();
  }
}

void DistributedDataParallel::broadcast_buffers() {
  const nn::NamedTensors buffers = module_.named_buffers();
  if (buffers.empty() || queue_->world_size() == 1) return;
  queue_->run([&](Communicator& c) {
    for (const auto& [name, t] : buffers) c.broadcast(t, 0);
  });
}

}  // namespace oomlab
