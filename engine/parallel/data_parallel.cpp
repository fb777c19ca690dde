// data_parallel.cpp — DataParallel / BalancedDataParallel (data_parallel.h).
#include "engine/parallel/data_parallel.h"

#include <algorithm>
#include <optional>

#include "engine/autograd/autocast.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/core/backend.h"
#include "engine/core/error.h"
#include "engine/core/thread_budget.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/concat.h"
#include "engine/ops/elementwise.h"

namespace oomlab {

std::vector<int64_t> even_chunk_sizes(int64_t batch, int64_t devices) {
  OOMLAB_CHECK(devices >= 1, "DataParallel needs at least one device (got ", devices, ")");
  OOMLAB_CHECK(batch >= devices, "DataParallel: a batch of ", batch, " samples cannot be split over ", devices,
               " devices (PyTorch's DataParallel needs batch >= number of devices)");
  const int64_t chunk = (batch + devices - 1) / devices;   // torch.chunk
  std::vector<int64_t> sizes;
  for (int64_t left = batch; left > 0; left -= chunk) sizes.push_back(std::min(chunk, left));
  return sizes;
}

std::vector<int64_t> balanced_chunk_sizes(int64_t batch, int64_t devices, int64_t gpu0_bsz) {
  OOMLAB_CHECK(devices >= 1, "balanced DataParallel needs at least one device (got ", devices, ")");
  OOMLAB_CHECK(gpu0_bsz >= 0 && gpu0_bsz <= batch, "balanced DataParallel: gpu0_bsz ", gpu0_bsz, " is not in 0..",
               batch, " (the batch of ", batch, " samples)");
  if (devices == 1) return {batch};
  OOMLAB_CHECK(batch - gpu0_bsz >= devices - 1, "balanced DataParallel: ", batch - gpu0_bsz,
               " samples left after gpu0_bsz ", gpu0_bsz, " cannot give each of the other ", devices - 1,
               " devices one (batch ", batch, ")");
  const int64_t unit = (batch - gpu0_bsz) / (devices - 1);
  std::vector<int64_t> sizes(size_t(devices), unit);
  sizes[0] = gpu0_bsz;
  for (int64_t i = 0, delta = (batch - gpu0_bsz) - unit * (devices - 1); i < delta; ++i) sizes[size_t(i + 1)] += 1;
  return sizes;
}

Tensor copy_to_device(const Tensor& t, Device device) {
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  out.copy_(t);
  if (t.device().type == DeviceType::cuda) device_synchronize(t.device());   // the source's stream ran it
  return out;
}

DataParallel::DataParallel(nn::ModulePtr module, std::vector<nn::ModulePtr> replicas, std::vector<Device> devices,
                           int64_t gpu0_bsz)
    : module_(std::move(module)), devices_(std::move(devices)), gpu0_bsz_(gpu0_bsz) {
  OOMLAB_CHECK(module_ != nullptr, "DataParallel: no module");
  OOMLAB_CHECK(!devices_.empty(), "DataParallel: no devices");
  OOMLAB_CHECK(replicas.size() + 1 == devices_.size(), "DataParallel: ", replicas.size(), " replicas for ",
               devices_.size(), " devices (one per device after the first)");
  for (size_t i = 0; i < devices_.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      OOMLAB_CHECK(!(devices_[i] == devices_[j]), "DataParallel: device ", devices_[i].str(), " is listed twice");
  replicas_.push_back(module_);
  const nn::NamedTensors ref = module_->state_dict();
  for (size_t i = 0; i < replicas.size(); ++i) {
    OOMLAB_CHECK(replicas[i] != nullptr, "DataParallel: replica ", i + 1, " is missing");
    const nn::NamedTensors s = replicas[i]->state_dict();
    OOMLAB_CHECK(s.size() == ref.size(), "DataParallel: the replica on ", devices_[i + 1].str(), " has ", s.size(),
                 " tensors, the module ", ref.size());
    for (size_t k = 0; k < s.size(); ++k) {
      OOMLAB_CHECK(s[k].first == ref[k].first && s[k].second.shape() == ref[k].second.shape(),
                   "DataParallel: the replica on ", devices_[i + 1].str(), " differs from the module at ",
                   ref[k].first);
      OOMLAB_CHECK(s[k].second.device() == devices_[i + 1], "DataParallel: replica tensor ", s[k].first, " is on ",
                   s[k].second.device().str(), ", not ", devices_[i + 1].str());
    }
    replicas_.push_back(std::move(replicas[i]));
  }
  for (const auto& [name, t] : ref)
    OOMLAB_CHECK(t.device() == devices_[0], "DataParallel: module tensor ", name, " is on ", t.device().str(),
                 ", not device 0 (", devices_[0].str(), ")");
  if (devices_.size() > 1)
    blas_ = std::make_unique<BlasThreadsGuard>(std::max(1, hardware_threads() / int(devices_.size())));
}

std::vector<int64_t> DataParallel::chunk_sizes(int64_t batch) const {
  return gpu0_bsz_ >= 0 ? balanced_chunk_sizes(batch, int64_t(devices_.size()), gpu0_bsz_)
                        : even_chunk_sizes(batch, int64_t(devices_.size()));
}

namespace {
// The module's gradients of one backward, taken out of the leaves so that the replicas'
// sum can be set once (and grad-ready hooks fire once, after the reduction).
struct LeafStash {
  std::vector<std::shared_ptr<TensorImpl>> grads;
  std::vector<std::vector<GradReadyHook>> hooks;
  std::vector<Tensor> params;
  explicit LeafStash(std::vector<Tensor> ps) : params(std::move(ps)) {
    for (Tensor& p : params) {
      grads.push_back(std::move(p.impl()->grad));
      p.impl()->grad = nullptr;
      hooks.push_back(std::move(p.impl()->grad_ready_hooks));
      p.impl()->grad_ready_hooks.clear();
    }
  }
  // Returns what the backward accumulated into each leaf and puts the stashed state back.
  std::vector<Tensor> restore() {
    std::vector<Tensor> taken;
    for (size_t k = 0; k < params.size(); ++k) {
      TensorImpl* impl = params[k].impl();
      taken.push_back(impl->grad ? Tensor(impl->grad) : Tensor());
      impl->grad = std::move(grads[k]);
      impl->grad_ready_hooks = std::move(hooks[k]);
    }
    params.clear();
    return taken;
  }
  ~LeafStash() { if (!params.empty()) restore(); }
};
}  // namespace

// Without grad (evaluation), a tail batch too small for the split runs on fewer devices
// (torch.chunk over min(B, N)); in training it is an error (chunk_sizes says why).
std::vector<int64_t> DataParallel::split_sizes(int64_t B, bool grad) const {
  const int64_t N = int64_t(devices_.size());
  const bool too_small = B < N || (gpu0_bsz_ >= 0 && (gpu0_bsz_ > B || B - gpu0_bsz_ < N - 1));
  return !grad && too_small && B >= 1 ? even_chunk_sizes(B, std::min(B, N)) : chunk_sizes(B);
}

void DataParallel::set_count_work(bool on) {
  count_work_ = on;
  work_.assign(devices_.size(), DeviceWork{});
}

void DataParallel::counted(size_t i, const std::function<void()>& run) {
  if (!count_work_) return run();
  FlopCounter counter;   // this thread's innermost: the device's own work
  CachingAllocator& al = allocator_for(devices_[i]);
  const int64_t before = al.stat("allocated_bytes.all.allocated");
  run();
  DeviceWork& w = work_[i];
  for (int k = 0; k < kNumMatrixKinds; ++k)
    for (int t = 0; t < kNumDTypes; ++t) w.flops[k][t] += counter.flops(MatrixKind(k), DType(t));
  w.launches += counter.launches();
  w.allocated_bytes += al.stat("allocated_bytes.all.allocated") - before;
}

void DataParallel::replicate(size_t n) {   // Broadcast of parameters and buffers from device 0
  MemoryContext ctx("DataParallel", "replicate");
  const nn::NamedTensors src = module_->state_dict();
  for (size_t i = 1; i < n; ++i) {
    nn::NamedTensors dst = replicas_[i]->state_dict();
    for (size_t k = 0; k < dst.size(); ++k) dst[k].second.copy_(src[k].second);
    if (devices_[0].type == DeviceType::cuda) device_synchronize(devices_[0]);
  }
}

std::vector<Tensor> DataParallel::scatter(const Tensor& x, const std::vector<int64_t>& sizes) {
  MemoryContext ctx("DataParallel", "scatter");
  std::vector<Tensor> chunks(sizes.size());
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor c = x.narrow(0, offset, sizes[i]);
    chunks[i] = i == 0 || sizes[i] == 0 ? c : copy_to_device(c, devices_[i]);
    offset += sizes[i];
  }
  return chunks;
}

Tensor DataParallel::gather(const std::vector<Tensor>& outs, const std::vector<int64_t>& sizes) {   // onto device 0
  MemoryContext ctx("DataParallel", "gather");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] > 0) parts.push_back(i == 0 ? outs[i].detach() : copy_to_device(outs[i].detach(), devices_[0]));
  return parts.size() == 1 ? parts[0].detach() : cat(parts, 0);
}

size_t DataParallel::index_of(Device d) const {
  return size_t(std::find(devices_.begin(), devices_.end(), d) - devices_.begin());
}

Tensor DataParallel::forward(const Tensor& x) {
  OOMLAB_CHECK_T(ShapeError, x.dim() >= 1, "DataParallel: the input ", x.str(), " has no batch dimension");
  OOMLAB_CHECK_T(DeviceError, x.device() == devices_[0], "DataParallel: the input is on ", x.device().str(),
                 ", the module on ", devices_[0].str());
  const bool training = is_training(), grad = grad_enabled();
  const std::vector<int64_t> sizes = split_sizes(x.size(0), grad);
  const size_t n = sizes.size();
  const std::optional<DType> amp = autocast_dtype();
  for (auto& r : replicas_) r->train(training);
  replicate(n);
  std::vector<Tensor> chunks = scatter(x, sizes), outs(n);
  std::vector<Device> used;   // devices with samples
  for (size_t i = 0; i < n; ++i) if (sizes[i] > 0) used.push_back(devices_[i]);
  run_on_devices(used, [&](Device d) {   // parallel_apply
    const size_t i = index_of(d);
    counted(i, [&] {
      GradModeGuard g(grad);
      AutocastGuard a(amp);
      outs[i] = (*replicas_[i])(chunks[i]);
    });
  });
  chunks.clear();
  Tensor out = gather(outs, sizes);
  bool needs_backward = false;
  for (const Tensor& o : outs) needs_backward = needs_backward || (o.defined() && o.requires_grad());
  if (!grad || !needs_backward) return out;
  std::vector<Tensor> params;
  for (const Tensor& p : module_->parameters()) if (p.requires_grad()) params.push_back(p);
  return attach_grad_fn(out, "DataParallelGather", params, [&]() -> BackwardFn {
    return [this, outs, sizes, used, params](const Tensor& g, const std::vector<bool>&) mutable {
      return backward_replicas(g, outs, sizes, used, params);
    };
  });
}

// The gradient back to the devices (Gather's backward), each replica's backward on its
// device thread (device 0's into the real parameters, stashed so that their hooks fire
// once, after the reduction), then the other devices' gradients summed onto device 0.
std::vector<Tensor> DataParallel::backward_replicas(const Tensor& g, std::vector<Tensor>& outs,
                                                    const std::vector<int64_t>& sizes, const std::vector<Device>& used,
                                                    const std::vector<Tensor>& params) {
  const size_t n = sizes.size();
  std::vector<Tensor> gs(n);
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    if (sizes[i] > 0) {
      Tensor c = g.narrow(0, offset, sizes[i]);
      gs[i] = i == 0 ? c.contiguous() : copy_to_device(c, devices_[i]);
    }
    offset += sizes[i];
  }
  auto drop_replica_grads = [&] { for (size_t i = 1; i < n; ++i) replicas_[i]->zero_grad(true); };
  std::vector<Tensor> reduced;
  try {
    LeafStash stash(params);
    run_on_devices(used, [&](Device d) {
      const size_t i = index_of(d);
      counted(i, [&] {
        if (outs[i].requires_grad()) run_backward(outs[i], gs[i]);
        outs[i] = Tensor();
        gs[i] = Tensor();
      });
    });
    reduced = reduce_replica_grads(stash.restore(), n, params.size());
  } catch (...) {
    drop_replica_grads();
    throw;
  }
  drop_replica_grads();
  return reduced;
}

// ReduceAddCoalesced: the other devices' parameter gradients added onto device 0's.
std::vector<Tensor> DataParallel::reduce_replica_grads(std::vector<Tensor> reduced, size_t n, size_t nparams) {
  MemoryContext ctx("DataParallel", "reduce_grads");
  std::vector<std::vector<Tensor>> replica_params(n);
  for (size_t i = 1; i < n; ++i)
    for (const Tensor& p : replicas_[i]->parameters()) if (p.requires_grad()) replica_params[i].push_back(p);
  for (size_t k = 0; k < nparams; ++k)
    for (size_t i = 1; i < n; ++i) {
      Tensor gi = replica_params[i][k].grad();
      if (!gi.defined()) continue;
      Tensor on0 = copy_to_device(gi, devices_[0]);
      replica_params[i][k].set_grad(Tensor());
      if (reduced[k].defined()) add_inplace(reduced[k], on0);
      else reduced[k] = on0;
    }
  return reduced;
}

}  // namespace oomlab
