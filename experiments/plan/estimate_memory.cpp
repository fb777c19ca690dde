// estimate_memory.cpp — `oomlab estimate`'s exact steady-step memory on meta (memory_report.h):
// the step as the trainer runs it (half, channels-last, DDP's reducer or DataParallel's
// replicas, autocast, loss scaling), its component bytes, counted work and the source's
// formula beside it.
#include <algorithm>
#include <optional>

#include "engine/core/flop_counter.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/device_graph.h"
#include "engine/memory/memory_export.h"
#include "engine/optim/optimizer.h"
#include "engine/train/channels_last.h"
#include "engine/train/graphed_step.h"
#include "engine/train/half_mode.h"
#include "engine/train/mixed_precision.h"
#include "engine/train/train_step.h"
#include "experiments/plan/ddp_on_meta.h"
#include "experiments/plan/dp_on_meta.h"
#include "experiments/plan/memory_report.h"
#include "experiments/plan/meta_model.h"
#include "experiments/plan/peak_by_module.h"

namespace oomlab {

nlohmann::json StepCost::to_json() const {
  return {{"flops", flops}, {"launches", launches}, {"allocated_bytes", allocated_bytes}};
}

nlohmann::json DpDeviceEstimate::to_json() const {
  return {{"device", device}, {"chunk", chunk}, {"peak_allocated_bytes", peak_allocated_bytes},
          {"peak_reserved_bytes", peak_reserved_bytes}, {"parallel_work", work.to_json()}};
}

int64_t MemoryEstimate::dp_max_peak_reserved_bytes() const {
  int64_t m = peak_reserved_bytes;
  for (const DpDeviceEstimate& d : dp_devices) m = std::max(m, d.peak_reserved_bytes);
  return m;
}

int64_t MemoryEstimate::ddp_buckets_total_bytes() const {
  int64_t total = 0;
  for (int64_t b : ddp_bucket_bytes) total += b;
  return total;
}

nlohmann::json MemoryEstimate::to_json() const {
  nlohmann::json j = {{"model", model}, {"optimizer", optimizer}, {"batch", batch}, {"params", params},
          {"outputs_per_sample", outputs_per_sample},
          {"exact", {{"params_bytes", params_bytes}, {"buffers_bytes", buffers_bytes},
                     {"grads_bytes", grads_bytes}, {"optimizer_state_bytes", optimizer_state_bytes},
                     {"master_weights_bytes", master_weights_bytes},
                     {"input_bytes", input_bytes}, {"activation_bytes", activation_bytes},
                     {"transient_bytes", transient_bytes}, {"peak_allocated_bytes", peak_allocated_bytes},
                     {"peak_reserved_bytes", peak_reserved_bytes}}},
          {"formula", {{"params_bytes", formula_params_bytes}, {"activation_bytes", formula_activation_bytes},
                       {"input_bytes", formula_input_bytes}, {"total_bytes", formula_bytes}}},
          {"formula_error_pct", formula_error_pct}, {"step_flops", step_flops},
          {"model_state_bytes", model_state_bytes},
          {"step_cost", step_cost.to_json()}};
  if (!ddp_bucket_bytes.empty())
    j["ddp"] = {{"bucket_bytes", ddp_bucket_bytes}, {"buckets_total_bytes", ddp_buckets_total_bytes()},
                {"zero_stage", zero_stage}, {"zero_shard_bytes", zero_shard_bytes},
                {"bytes_sent_per_step", ddp_bytes_sent}, {"offload_host_bytes", offload_host_bytes},
                {"offload_host_peak_bytes", offload_host_peak_bytes},
                {"offload_micro_copy_bytes", offload_micro_copy_bytes},
                {"offload_step_copy_bytes", offload_step_copy_bytes}};
  if (graph_pool_bytes >= 0)
    j["cuda_graphs"] = {{"pool_bytes", graph_pool_bytes}, {"capture_peak_allocated_bytes", graph_capture_peak_bytes},
                        {"peak_reserved_bytes", graph_reserved_peak_bytes}};
  if (by_module) j["by_module"] = by_module->to_json();
  if (!dp_devices.empty()) {
    j["data_parallel"]["devices"] = nlohmann::json::array();
    for (const DpDeviceEstimate& d : dp_devices) j["data_parallel"]["devices"].push_back(d.to_json());
    j["data_parallel"]["max_peak_reserved_bytes"] = dp_max_peak_reserved_bytes();
  }
  return j;
}


namespace {
StepCost step_cost_of(const FlopCounter& c, int64_t allocated_bytes) {
  StepCost out;
  out.launches = c.launches();
  out.allocated_bytes = allocated_bytes;
  for (int k = 0; k < kNumMatrixKinds; ++k)
    for (int t = 0; t < kNumDTypes; ++t)
      if (c.flops(MatrixKind(k), DType(t)) > 0)
        out.flops[matrix_kind_name(MatrixKind(k))][dtype_name(DType(t))] = c.flops(MatrixKind(k), DType(t));
  return out;
}
}  // namespace

namespace {
// --cuda-graphs: the next step captured on meta as GraphedStep captures it (DeviceGraph:
// empty_cache, then a private pool). An out-of-memory error here is the capture's: the
// graphed run does not fit where the eager one does.
void estimate_graph(TrainStep& step, const Tensor& x, const Tensor& y, StepOutput& last, MemoryEstimate& e) {
  last = StepOutput{};   // the trainer holds no step's loss when it captures
  CachingAllocator& al = allocator_for(meta_device());
  al.reset_window_peaks();
  DeviceGraph graph(meta_device());
  capture_training_step(graph, step, x, y);
  e.graph_pool_bytes = al.stat("graph_pools_reserved_bytes");
  e.graph_capture_peak_bytes = al.window_peak("allocated_bytes.all");
  e.graph_reserved_peak_bytes = al.stat("reserved_bytes.all.peak");
}
}  // namespace

namespace {
// The source's formula (params x 4 x n, n = 2 SGD / 4 Adam; batch x outputs x 4 x 2; the
// input) and its error against the exact peak already in `e`.
void fill_source_formula(MemoryEstimate& e, const std::string& optimizer, int64_t batch, int64_t outputs,
                         int64_t input_bytes) {
  const int64_t n = optimizer == "sgd" ? 2 : 4;
  e.formula_params_bytes = e.params * 4 * n;
  e.formula_activation_bytes = batch * outputs * 4 * 2;
  e.formula_input_bytes = input_bytes;
  e.formula_bytes = e.formula_params_bytes + e.formula_activation_bytes + e.formula_input_bytes;
  e.formula_error_pct = 100.0 * double(e.formula_bytes - e.peak_allocated_bytes) / double(e.peak_allocated_bytes);
}
}  // namespace

namespace {
// Gradients (the model's and the master copies'), master weights and optimizer state, as
// they stand after a step.
void fill_state_bytes(nn::Module& model, const MasterWeights* masters, Optimizer& opt, const DdpOnMeta* ddp,
                      MemoryEstimate& e) {
  e.grads_bytes = 0;
  if (ddp) e.ddp_bytes_sent = ddp->comm.stats().bytes_sent;
  if (ddp && ddp->ddp.zero_stage() > 0) {   // the shards: the optimizer's copy of this rank's elements
    e.zero_shard_bytes = ddp->ddp.zero_optimizer_copy_bytes();
    // stage 2: the gradient shard backward sums into (freed by the step, as the paper's
    // partitioned gradients are held through backward); stage 1 keeps the model's full ones
    // (offloaded: on the host)
    if (ddp->ddp.zero_stage() >= 2 && ddp->ddp.offload() == ZeroOffload::none)
      e.grads_bytes += ddp->ddp.zero_bucket_shard_bytes();
    // stage 3: the parameters a rank keeps are its shards (their 16-bit twins of the masters)
    if (ddp->ddp.zero_stage() == 3) e.params_bytes = ddp->ddp.zero_bucket_shard_bytes();
  }
  for (const auto& [n, p] : model.named_parameters())
    if (p.grad().defined()) e.grads_bytes += int64_t(p.grad().nbytes());
  // What backward produces (the paper's gradients): one per parameter, or stage 2's shard sums.
  int64_t backward_grads = 0;
  if (ddp && ddp->ddp.zero_stage() >= 2) {
    backward_grads = ddp->ddp.offload() == ZeroOffload::none ? ddp->ddp.zero_bucket_shard_bytes() : 0;
  } else {
    for (const auto& [n, p] : model.named_parameters())
      if (p.requires_grad()) backward_grads += int64_t(p.nbytes());
  }
  if (masters) {   // the float32 copies of the 16-bit parameters and their gradients
    for (const auto& [n, m] : masters->state_tensors()) {
      e.master_weights_bytes += int64_t(m.nbytes());
      if (m.grad().defined()) e.grads_bytes += int64_t(m.grad().nbytes());
    }
  }
  e.optimizer_state_bytes = bytes_of(opt.state_tensors());
  if (ddp && ddp->ddp.offload() != ZeroOffload::none) {   // on the host: its allocator's bytes instead
    e.offload_host_bytes = e.optimizer_state_bytes + ddp->ddp.zero_host_shard_bytes();
    const int64_t shard = ddp->ddp.zero_bucket_shard_bytes();   // one shard of every bucket, their dtypes
    const bool stage1 = ddp->ddp.zero_stage() == 1, params = ddp->ddp.offload() == ZeroOffload::params;
    e.offload_micro_copy_bytes = (stage1 ? 0 : shard) + (params ? 2 * shard : 0);
    e.offload_step_copy_bytes = shard + (stage1 ? shard : 0);
    e.offload_host_peak_bytes = allocator_for(offload_host(meta_device())).stat("allocated_bytes.all.peak");
    e.optimizer_state_bytes = e.zero_shard_bytes = 0;
    if (ddp->ddp.offload() == ZeroOffload::params) e.params_bytes = 0;
  }
  // ZeRO's "model states" (Rajbhandari et al. 2020, Figure 1): parameters, the gradients
  // backward produces, optimizer state, masters and shards; not the step's float32 copies
  // of the gradients (MasterWeights' stay until the next zero_grad, ZeRO's are freed).
  e.model_state_bytes = e.params_bytes + backward_grads + e.optimizer_state_bytes + e.master_weights_bytes +
                        e.zero_shard_bytes;
}

// The optimizer over `params` (the model's, the masters' or ZeRO's shards); its lr moves no byte.
std::unique_ptr<Optimizer> estimate_optimizer(const RunSpec& spec, const std::string& optimizer, NamedTensors params) {
  ParamGroup g;
  g.params = std::move(params);
  g.lr = optimizer == "sgd" ? 0.1 : 1e-3;
  if (optimizer == "sgd") g.momentum = spec.momentum.value_or(0.9);   // estimate's --momentum default
  return make_optimizer(optimizer, {g});
}

// --by-module: what outlives the step, by the storage it holds (peak_by_module.h).
OwnedTensors owned_after_step(nn::Module& model, const std::optional<MasterWeights>& masters, const Optimizer& opt,
                              const Tensor& x, const Tensor& y) {
  OwnedTensors owned(model.memory_label());
  for (const auto& [n, p] : model.named_parameters()) {
    owned.add("parameters", n, p);
    owned.add("gradients", n, p.grad());
  }
  for (const auto& [n, b] : model.named_buffers()) owned.add("buffers", n, b);
  for (const auto& [n, t] : opt.state_tensors()) owned.add("optimizer_state", n, t);
  if (masters)
    for (const auto& [n, m] : masters->state_tensors()) {
      owned.add("optimizer_state", n, m);
      owned.add("gradients", n, m.grad());
    }
  owned.add_module("inputs", "input", x);
  owned.add_module("inputs", "input", y);
  return owned;
}

// The estimate's description: model, optimizer, batch, parameter and buffer bytes.
MemoryEstimate described(const RunSpec& spec, const std::string& optimizer, int64_t batch, int64_t outputs,
                         nn::Module& model) {
  MemoryEstimate e;
  e.model = spec.model;
  e.optimizer = optimizer;
  e.batch = batch;
  e.params = model.num_parameters();
  e.outputs_per_sample = outputs;
  e.params_bytes = bytes_of(model.named_parameters());
  e.buffers_bytes = bytes_of(model.named_buffers());
  return e;
}
}  // namespace

namespace {
// DataParallel as train_dp refuses it: float32 replicas only; bdp with device 0's share.
void check_dp_estimate(const RunSpec& spec) {
  OOMLAB_CHECK(!spec.half, "--half with --parallel ", parallel_mode_name(spec.parallel),
               " is not supported (the replicas stay float32)");
  OOMLAB_CHECK(spec.parallel != ParallelMode::bdp || spec.gpu0_bsz >= 0,
               "--parallel bdp needs --gpu0-bsz B0 (device 0's samples of the batch)");
}

// A DataParallel replica as train_dp builds it: the model on `d`, laid out as the module.
nn::ModulePtr replica_on_meta(const RunSpec& spec, Device d) {
  nn::ModulePtr m = build_on_meta(spec, d).model;
  if (spec.channels_last) channels_last_model(*m);
  return m;
}

// The devices of a DataParallel step; device 0's own thread's work joins the caller's (both
// run there; its allocations are already in step_cost's, made on device 0).
void add_dp_devices(const DpOnMeta& dp, MemoryEstimate& e) {
  e.dp_devices = dp.devices();
  const DpDeviceEstimate& d0 = e.dp_devices[0];
  e.peak_allocated_bytes = d0.peak_allocated_bytes;
  e.peak_reserved_bytes = d0.peak_reserved_bytes;
  e.step_cost.launches += d0.work.launches;
  for (const auto& [kind, by_dtype] : d0.work.flops)
    for (const auto& [dtype, flops] : by_dtype) {
      e.step_cost.flops[kind][dtype] += flops;
      e.step_flops[dtype] += flops;
    }
}
// Fresh allocators on meta:0..devices-1, each capped at `capacity` (0: none); with
// `record`, device 0's history and the op spans are kept.
void reset_meta_devices(int64_t devices, uint64_t capacity, bool record) {
  reset_allocators();
  for (int64_t i = 0; i < devices; ++i) allocator_for(meta_device(int(i))).set_capacity(capacity);
  if (record) {
    allocator_for(meta_device()).record_history(true);
    OpProfiler::enable(true);
  }
}
}  // namespace

MemoryEstimate estimate_memory(const RunSpec& spec, int64_t batch, const std::string& optimizer,
                               uint64_t device_memory, bool record, bool by_module) {
  OOMLAB_CHECK(batch >= 1, "--batch must be >= 1 (got ", batch, ")");
  // "Sum of layer outputs" as the source's table counts it: outputs that occupy memory
  // of their own (in-place ReLU and flatten views share their input's).
  // (at the run's batch: a one-sample training forward fails where BatchNorm sees a 1x1 map)
  const int64_t outputs = summarize_model(spec, batch).distinct_activation_values_per_sample;
  const bool data_parallel = spec.parallel == ParallelMode::dp || spec.parallel == ParallelMode::bdp;
  if (data_parallel) check_dp_estimate(spec);
  reset_meta_devices(data_parallel ? spec.devices : 1, device_memory, record);
  Built b = build_on_meta(spec);
  // --half: the model converted as the trainer converts it; masters before the optimizer.
  std::optional<HalfIO> half_io;
  std::optional<MasterWeights> masters;
  if (spec.half) {
    half_model(*b.model, DType::f16);
    half_io.emplace(DType::f16, spec.master_weights);
    if (spec.master_weights && spec.zero_stage == 0) masters.emplace(*b.model);   // ZeRO: sharded masters
  }
  if (spec.channels_last) channels_last_model(*b.model);   // as the trainer, after --half
  MemoryEstimate e = described(spec, optimizer, batch, outputs, *b.model);

  // --parallel ddp: one rank's reducer, its buckets allocated before the optimizer state.
  std::optional<DdpOnMeta> ddp;
  check_zero_supported(spec);
  if (spec.parallel == ParallelMode::ddp) {
    ddp.emplace(*b.model, int(spec.devices), spec.bucket_cap, spec.zero_stage,
                spec.zero_stage > 0 && spec.master_weights, spec.offload);
    e.ddp_bucket_bytes = ddp->ddp.bucket_bytes();
    e.zero_stage = spec.zero_stage;
  }
  std::optional<DpOnMeta> dp;   // --parallel dp | bdp: the replicas on meta:1..N-1
  if (data_parallel) dp.emplace(b.model, spec.devices, spec.parallel == ParallelMode::bdp ? spec.gpu0_bsz : -1, batch,
                                [&](Device d) { return replica_on_meta(spec, d); });
  auto opt = estimate_optimizer(spec, optimizer, ddp && spec.zero_stage > 0 ? ddp->ddp.optimizer_parameters()
                                                 : masters                  ? masters->parameters()
                                                                            : b.model->named_parameters());
  Tensor x = make_input(b, batch, spec.channels_last), y = make_target(b, batch);
  e.input_bytes = int64_t(x.nbytes() + y.nbytes());
  // The run's mixed precision: autocast and the loss scaler are part of the step.
  std::vector<StepStrategy*> strategies;
  PeakByModuleRecorder peak_owners(allocator_for(meta_device()));   // --by-module: step 2, from its window
  if (by_module) strategies.push_back(&peak_owners);
  if (ddp) strategies.push_back(&ddp->strategy);   // first of the techniques, as the trainer orders them
  std::optional<AutocastStrategy> autocast;
  std::optional<GradScaler> scaler;
  if (spec.amp) strategies.push_back(&autocast.emplace(*spec.amp));
  if (half_io) strategies.push_back(&*half_io);
  if (masters) strategies.push_back(&*masters);
  if (spec.loss_scale.kind != LossScaleSpec::Kind::none) strategies.push_back(&scaler.emplace(spec.loss_scale));
  TrainStep step(dp ? *dp->dp : *b.model, *opt, strategies);
  step.run(x, y);                       // step 1 creates optimizer state
  // The allocator's peaks from here on are step 2's, from its zero_grad on (step 1's gradients
  // can exceed them): the results' `memory` block reports metrics.exact.peak_allocated_bytes.
  step.zero_grad();
  allocator_for(meta_device()).reset_peak_stats();
  if (by_module) peak_owners.arm();
  if (ddp) ddp->comm.reset_stats();     // the steady step's communication
  if (dp) dp->begin_steady_step();
  FlopCounter counter;                  // the steady step's matrix work (flop_counter.h)
  const int64_t allocated_before = allocator_for(meta_device()).stat("allocated_bytes.all.allocated");
  StepOutput s2 = step.run(x, y);       // steady state
  e.step_cost = step_cost_of(counter, allocator_for(meta_device()).stat("allocated_bytes.all.allocated") -
                                          allocated_before);
  for (int t = 0; t < kNumDTypes; ++t)
    if (counter.flops(DType(t)) > 0) e.step_flops[dtype_name(DType(t))] = counter.flops(DType(t));
  fill_state_bytes(*b.model, masters ? &*masters : nullptr, *opt, ddp ? &*ddp : nullptr, e);
  e.activation_bytes = s2.memory.after_forward - s2.memory.start_allocated;
  e.peak_allocated_bytes = s2.memory.step_peak;
  e.peak_reserved_bytes = s2.memory.reserved_peak;
  e.transient_bytes = e.peak_allocated_bytes - s2.memory.after_forward;
  if (by_module) e.by_module = peak_owners.finish(owned_after_step(*b.model, masters, *opt, x, y), s2.memory.step_peak);
  if (dp) add_dp_devices(*dp, e);
  fill_source_formula(e, optimizer, batch, outputs, int64_t(x.nbytes()));
  if (record) OpProfiler::enable(false);
  if (spec.cuda_graphs) estimate_graph(step, x, y, s2, e);
  return e;
}

}  // namespace oomlab
