// ddp_zero.cpp — ZeRO stages 1 and 2 inside DistributedDataParallel's reducer
// (distributed_data_parallel.h): shards of every bucket, buckets that exist only while they
// are reduced, the reduce_scatter of each bucket, each shard's gradient before the optimizer
// step and the all-gather of the updated shards into the parameters.
#include <algorithm>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/elementwise.h"
#include "engine/parallel/distributed_data_parallel.h"

namespace oomlab {

ZeroOffload parse_zero_offload(const std::string& text) {
  if (text == "none" || text.empty()) return ZeroOffload::none;
  if (text == "optimizer") return ZeroOffload::optimizer;
  if (text == "params") return ZeroOffload::params;
  throw ValueError(str_cat("'", text, "' is not an offload (none, optimizer, params)"));
}

const char* zero_offload_name(ZeroOffload o) {
  return o == ZeroOffload::optimizer ? "optimizer" : o == ZeroOffload::params ? "params" : "none";
}

Device offload_host(Device rank_device) {
  return rank_device.is_meta() ? meta_device(kMaxDeviceIndex - 1) : cpu_device(kMaxDeviceIndex - 1);
}

namespace {
// `t` as `dtype` on `device`: itself when it already is.
Tensor as_on(const Tensor& t, DType dtype, Device device) {
  if (t.dtype() == dtype && t.device() == device) return t;
  Tensor out = Tensor::empty(t.shape(), dtype, device);
  out.copy_(t);
  return out;
}
}  // namespace

namespace {
// A channels_last parameter's elements in memory order are its NHWC permutation's.
const std::vector<int64_t> kNhwc = {0, 2, 3, 1}, kFromNhwc = {0, 3, 1, 2};
bool nhwc_ordered(const Tensor& param) {
  return !param.is_contiguous() && param.dim() == 4 && param.is_contiguous(MemoryFormat::channels_last);
}
}  // namespace

Tensor DistributedDataParallel::zero_flat(const Tensor& t, const Tensor& param) {
  return (nhwc_ordered(param) ? t.permute(kNhwc) : t).reshape({t.numel()});
}

Tensor DistributedDataParallel::zero_unflat(const Tensor& flat, const Tensor& param) {
  if (!nhwc_ordered(param)) return flat.reshape(param.shape());
  const Shape& s = param.shape();
  return flat.reshape({s[0], s[2], s[3], s[1]}).permute(kFromNhwc);
}

void DistributedDataParallel::make_shards(Device dev, bool master_weights) {
  const int64_t world = queue_->world_size(), rank = queue_->rank();
  NoGradGuard no_grad;
  MemoryContext ctx("DistributedDataParallel", "zero_shards");
  const Device shards_at = offload_ == ZeroOffload::none ? dev : offload_host(dev);
  const Device params_at = offload_ == ZeroOffload::params ? shards_at : dev;
  for (Bucket& b : buckets_) {
    b.shard = (b.numel + world - 1) / world;
    const bool sixteen = b.dtype == DType::f16 || b.dtype == DType::bf16;
    // the last rank's padding stays 0 (its gradient is 0 too: it never moves)
    b.shard_param = Tensor::zeros({b.shard}, master_weights && sixteen ? DType::f32 : b.dtype, shards_at);
    copy_flat_range(b, rank * b.shard, b.shard_param, Side::values, /*into_tensors=*/false);
    if (zero_stage_ == 3)   // the parameters' own shard: the float32 master's 16-bit twin, or the shard itself
      b.param_shard = as_on(b.shard_param, b.dtype, params_at);
  }
}

void DistributedDataParallel::copy_flat_range(const Bucket& b, int64_t begin, const Tensor& flat, Side side,
                                              bool into_tensors) const {
  const int64_t end = begin + flat.numel();
  for (size_t slot = 0; slot < b.params.size(); ++slot) {
    const Tensor& param = params_[b.params[slot]].second;
    const Tensor t = side == Side::values ? param.detach() : param.grad();
    const int64_t n = param.numel(), lo = std::max(begin, b.offsets[slot]), hi = std::min(end, b.offsets[slot] + n);
    if (lo >= hi) continue;
    OOMLAB_CHECK(t.defined(), "ZeRO: ", params_[b.params[slot]].first, " has no gradient to reduce");
    Tensor elems = flat.narrow(0, lo - begin, hi - lo);
    if (!into_tensors) {
      elems.copy_(zero_flat(t, param).narrow(0, lo - b.offsets[slot], hi - lo));
      continue;
    }
    Tensor ordered = zero_flat(t, param);   // a view of the tensor when laid out as the parameter
    ordered.narrow(0, lo - b.offsets[slot], hi - lo).copy_(elems);
    if (ordered.impl()->storage != t.impl()->storage) {   // (a gradient in another layout: a copy)
      Tensor dst = t;
      dst.copy_(zero_unflat(ordered, param));
    }
  }
}

nn::NamedTensors DistributedDataParallel::optimizer_parameters() const {
  if (zero_stage_ == 0) return params_;
  nn::NamedTensors out;
  for (size_t i = 0; i < buckets_.size(); ++i) out.push_back({str_cat("zero.shard", i), buckets_[i].shard_param});
  return out;
}

std::vector<size_t> DistributedDataParallel::zero_shard_groups() const {
  std::vector<size_t> out;
  for (const Bucket& b : buckets_) out.push_back(b.group);
  return out;
}

int64_t DistributedDataParallel::zero_bucket_shard_bytes() const {
  int64_t n = 0;
  for (const Bucket& b : buckets_) n += b.shard * int64_t(dtype_size(b.dtype));
  return n;
}

int64_t DistributedDataParallel::zero_optimizer_copy_bytes() const {
  int64_t n = 0;
  for (const Bucket& b : buckets_)
    if (zero_stage_ < 3 || b.param_shard.impl() != b.shard_param.impl()) n += int64_t(b.shard_param.nbytes());
  return n;
}

int64_t DistributedDataParallel::zero_host_shard_bytes() const {
  int64_t n = 0;
  for (const Bucket& b : buckets_) {
    if (!(b.shard_param.device() == queue_->device())) n += int64_t(b.shard_param.nbytes());
    if (b.param_shard.defined() && b.param_shard.impl() != b.shard_param.impl() &&
        !(b.param_shard.device() == queue_->device()))
      n += int64_t(b.param_shard.nbytes());
  }
  return n;
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
  b.flat.narrow(0, b.offsets[slot], n).copy_(zero_flat(grad, params_[param].second));
  if (zero_stage_ >= 2) params_[param].second.set_grad(Tensor());   // only the shard's share is kept
}

void DistributedDataParallel::launch_zero(Bucket& b) {
  MemoryContext ctx("DistributedDataParallel", "zero_reduced");
  b.reduced = Tensor::empty({b.shard}, b.dtype, queue_->device());
  // The work drops its handles before it completes: the buffers are freed by this thread
  // (finish_zero), at the same point of every step, never by the queue's thread later.
  Tensor flat = b.flat, reduced = b.reduced;
  b.work = queue_->submit([flat, reduced](Communicator& c) mutable {
    c.reduce_scatter(flat, reduced, ReduceOp::avg);
    flat = Tensor();
    reduced = Tensor();
  });
}

void DistributedDataParallel::finish_zero(Bucket& b) {
  NoGradGuard no_grad;
  if (zero_stage_ == 1) {   // back into this rank's slice of the full gradients
    copy_flat_range(b, int64_t(queue_->rank()) * b.shard, b.reduced, Side::grads, /*into_tensors=*/true);
  } else {   // stage 2's sum over micro-batches (offloaded: on the host, the slice copied there at once)
    const Tensor slice = as_on(b.reduced, b.dtype, b.shard_param.device());
    if (b.grad_sum.defined()) add_inplace(b.grad_sum, slice);
    else b.grad_sum = slice;
  }
  b.reduced = Tensor();
  b.flat = Tensor();   // the bucket's buffer is freed
  b.work = CommQueue::Work();
}

void DistributedDataParallel::prepare_shard_grads() {
  if (zero_stage_ == 0) return;
  NoGradGuard no_grad;
  MemoryContext ctx("DistributedDataParallel", "zero_shard_grads");
  for (Bucket& b : buckets_) {
    const DType d = b.shard_param.dtype();
    if (zero_stage_ == 1) {
      Tensor g = Tensor::zeros({b.shard}, d, b.shard_param.device());   // padding: 0
      copy_flat_range(b, int64_t(queue_->rank()) * b.shard, g, Side::grads, /*into_tensors=*/false);
      b.shard_param.set_grad(g);
    } else if (b.grad_sum.defined()) {   // (offloaded: copied to the host)
      b.shard_param.set_grad(as_on(b.grad_sum, d, b.shard_param.device()));
      b.grad_sum = Tensor();
    }
  }
}

void DistributedDataParallel::gather_parameters() {
  if (zero_stage_ == 0) return;
  NoGradGuard no_grad;
  MemoryContext ctx("DistributedDataParallel", "zero_gather");
  const int64_t world = queue_->world_size();
  for (Bucket& b : buckets_) b.shard_param.set_grad(Tensor());   // the step is done with them
  if (zero_stage_ == 3) {   // the parameters stay sharded: only the 16-bit twin of a master follows it
    for (Bucket& b : buckets_)
      if (b.param_shard.impl() != b.shard_param.impl()) b.param_shard.copy_(b.shard_param);
    return;
  }
  for (Bucket& b : buckets_) {
    const Tensor send = as_on(b.shard_param, b.dtype, queue_->device());   // (offloaded: copied back)
    Tensor full = Tensor::empty({b.shard * world}, b.dtype, queue_->device());
    queue_->run([&](Communicator& c) { c.all_gather(send, full); });
    copy_flat_range(b, 0, full.narrow(0, 0, b.numel), Side::values, /*into_tensors=*/true);
  }
}

}  // namespace oomlab
