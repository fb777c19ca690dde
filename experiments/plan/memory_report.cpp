// memory_report.cpp — layer summary and formula-vs-exact memory estimate (meta device).
// Korthikanti et al. 2022 (sec. 4.1) count, per transformer layer, fp16 activations and
// 1-byte dropout masks: attention 11sbh + 5as^2b (QKV input 2sbh, Q and K 4sbh, softmax
// output 2as^2b, its dropout mask as^2b, dropout output 2as^2b and V 2sbh, output
// projection input 2sbh, its dropout mask sbh), MLP 19sbh (fc1 input 2sbh, GELU input
// 8sbh, fc2 input 8sbh, mask sbh), two LayerNorm inputs 4sbh: s*b*h*(34 + 5as/h).
// fp32 (what we train in): every 2-byte term doubles, the masks stay 1 byte (our dropout
// saves a uint8 keep-mask, like PyTorch's bool mask): attention 21sbh + 9as^2b, MLP 37sbh,
// LayerNorm 8sbh -> s*b*h*(66 + 9as/h). Our BERT ops save exactly the paper's terms in
// fp32: linear saves its input (q/k/v share one: counted once), bmm saves q and k, then
// the softmax-dropout output and v, masked_softmax saves its output, dropout its uint8
// mask, GELU its input; the residual adds save nothing. The only extra is layer_norm's
// mean and rstd (2 x 4 bytes per row, 16*s*b per layer), so measured = fp32 formula +
// 16sb (bert-base, s=128, b=2: 16,519,168 vs 16,515,072 bytes). BERT is post-LN (the
// LayerNorms see the residual sums; the paper's GPT is pre-LN): same byte counts.
#include "experiments/plan/memory_report.h"

#include <cmath>
#include <regex>
#include <set>
#include <unordered_map>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/saved_tensor.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/device_graph.h"
#include "engine/train/graphed_step.h"
#include "engine/memory/memory_export.h"
#include "engine/nn/checkpoint_plan.h"
#include "engine/nn/forward_observer.h"
#include "engine/optim/optimizer.h"
#include "engine/train/channels_last.h"
#include "engine/train/half_mode.h"
#include "engine/train/mixed_precision.h"
#include "engine/train/train_step.h"
#include "engine/core/byte_sizes.h"
#include "engine/core/flop_counter.h"
#include "experiments/plan/ddp_on_meta.h"
#include "experiments/plan/layer_recorder.h"
#include "models/graph_model.h"
#include "models/model_zoo.h"

namespace oomlab {

// The zoo's own input for each model (models/model_zoo.h), so that no model is left out: a
// list here once gave tiny-ff ImageNet's 3x224x224 input (77.8M parameters, not 0.67M).
Shape default_input_for(const std::string& model) {
  const ModelConfig c = default_model_config(model);
  if (model_input_kind(model) == InputKind::tokens) return {c.seq_len};
  return {c.in_channels, c.height, c.width};
}

int64_t default_classes_for(const std::string& model) {
  if (is_graph_model(model))
    if (const int64_t k = graph_model_config(model).num_classes; k > 0) return k;
  if (model_input_kind(model) == InputKind::tokens) return 2;
  if (model_task_kind(model) == TaskKind::segmentation) return default_model_config(model).num_classes;
  Shape in = default_input_for(model);
  return in[1] == 28 ? 10 : 1000;
}

namespace {
struct Built {
  nn::ModulePtr model;
  std::string model_name;
  ModelConfig cfg;
  Shape input;         // per sample: C,H,W or T
  int64_t classes;
  bool tokens = false, segmentation = false;
};

Built build_on_meta(const RunSpec& spec) {
  Built b;
  b.model_name = spec.model;
  b.tokens = model_input_kind(spec.model) == InputKind::tokens;
  b.segmentation = model_task_kind(spec.model) == TaskKind::segmentation;
  b.classes = spec.num_classes > 0 ? spec.num_classes : default_classes_for(spec.model);
  spec.arch.check_fits(spec.model);
  ModelConfig cfg = default_model_config(spec.model);
  cfg.num_classes = b.classes;
  cfg.device = meta_device();
  spec.arch.apply(cfg);
  if (b.tokens) {
    OOMLAB_CHECK(spec.input.empty(), spec.model, " takes token ids: give --seq-len N, not --input");
    OOMLAB_CHECK(spec.seq_len >= 0, "--seq-len must be >= 1 (got ", spec.seq_len, ")");
    if (spec.seq_len > 0) cfg.seq_len = spec.seq_len;
    check_seq_fits(spec.model, spec.arch, cfg.seq_len, spec.seq_len > 0 ? "--seq-len" : "the default --seq-len");
  } else {
    OOMLAB_CHECK(spec.seq_len == 0, "--seq-len is for token models; ", spec.model, " takes images (--input C,H,W)");
    Shape in = spec.input.empty() ? default_input_for(spec.model) : spec.input;
    OOMLAB_CHECK_T(ShapeError, in.size() == 3, "--input must be C,H,W (got ", shape_str(in), ")");
    cfg.in_channels = in[0];
    cfg.height = in[1];
    cfg.width = in[2];
  }
  Shape s = model_input_shape(spec.model, cfg, 1);
  b.input = Shape(s.begin() + 1, s.end());
  b.cfg = cfg;
  b.model = build_model(spec.model, cfg);
  apply_checkpoint_plan(*b.model, plan_checkpoints(*b.model, model_probe_input(spec.model, cfg), spec.checkpoint));
  return b;
}

// The batch's input on meta (token ids are never read there, so their values do not matter).
// The batch as the trainer hands it to the step (--channels-last: laid out so, 4-D inputs).
Tensor make_input(const Built& b, int64_t batch, bool channels_last = false) {
  const Shape shape = model_input_shape(b.model_name, b.cfg, batch);
  const MemoryFormat f = channels_last && shape.size() == 4 ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  return Tensor::empty_format(shape, b.tokens ? DType::i64 : DType::f32, meta_device(), f);
}

Tensor make_target(const Built& b, int64_t batch) {
  if (!b.segmentation) return Tensor::empty({batch}, DType::i64, meta_device());
  return Tensor::empty({batch, b.input[1], b.input[2]}, DType::i64, meta_device());
}

int64_t bytes_of(const nn::NamedTensors& ts) {
  int64_t s = 0;
  for (const auto& [n, t] : ts) s += int64_t(t.nbytes());
  return s;
}
}  // namespace

nlohmann::json ModelSummary::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const LayerRow& r : layers)
    rows.push_back({{"name", r.name}, {"type", r.type}, {"output_shape", r.output_shape},
                    {"output_values", r.output_values}, {"params", r.params},
                    {"output_bytes", r.output_bytes}, {"saved_bytes", r.saved_bytes}, {"inplace", r.inplace},
                    {"compute_dtype", r.compute_dtype}, {"output_dtype", r.output_dtype}});
  nlohmann::json j = {{"model", model}, {"batch", batch}, {"input", input}, {"layers", rows},
          {"totals", {{"params", params}, {"activation_values_per_sample", activation_values_per_sample},
                      {"distinct_activation_values_per_sample", distinct_activation_values_per_sample},
                      {"saved_bytes", saved_bytes}, {"nonleaf_saved_bytes", nonleaf_saved_bytes},
                      {"forward_only_peak_bytes", forward_only_peak_bytes},
                      {"training_forward_peak_bytes", training_forward_peak_bytes}}}};
  if (!transformer_layers.empty()) {
    nlohmann::json t = nlohmann::json::array();
    for (const TransformerLayerRow& r : transformer_layers)
      t.push_back({{"name", r.name}, {"seq", r.seq}, {"batch", r.batch}, {"hidden", r.hidden}, {"heads", r.heads},
                   {"saved_bytes", r.saved_bytes}, {"korthikanti_fp16_bytes", r.korthikanti_fp16_bytes},
                   {"korthikanti_fp32_bytes", r.korthikanti_fp32_bytes},
                   {"saved_over_korthikanti_fp32", r.korthikanti_fp32_bytes
                                                       ? double(r.saved_bytes) / double(r.korthikanti_fp32_bytes)
                                                       : 0.0}});
    j["transformer_layers"] = t;
  }
  return j;
}

namespace {
int64_t forward_only_peak(Built& b, int64_t batch, CachingAllocator& al) {   // inference: no activations kept
  b.model->eval();
  Tensor x = make_input(b, batch);
  al.reset_peak_stats();
  NoGradGuard ng;
  Tensor y = (*b.model)(x);
  b.model->train();
  return al.stat("allocated_bytes.all.peak");
}

// Korthikanti et al.'s s*b*h*(34 + 5as/h) = 34sbh + 5as^2b (and the fp32 variant
// 66sbh + 9as^2b) beside what each transformer layer saved.
void fill_transformer_rows(std::vector<TransformerLayerRow>& rows, int64_t heads,
                           const std::unordered_map<std::string, int64_t>& by_frame) {
  for (TransformerLayerRow& t : rows) {
    t.heads = heads;
    for (const auto& [frame, bytes] : by_frame)
      if (frame == t.name || frame.rfind(t.name + ".", 0) == 0) t.saved_bytes += bytes;
    const int64_t sbh = t.seq * t.batch * t.hidden, as2b = t.heads * t.seq * t.seq * t.batch;
    t.korthikanti_fp16_bytes = 34 * sbh + 5 * as2b;
    t.korthikanti_fp32_bytes = 66 * sbh + 9 * as2b;
  }
}
}  // namespace

ModelSummary summarize_model(const RunSpec& spec, int64_t batch) {
  OOMLAB_CHECK(batch >= 1, "--batch must be >= 1 (got ", batch, ")");
  reset_allocators();
  Built b = build_on_meta(spec);
  AutocastGuard amp(spec.amp);   // both forwards run as the training step would
  ModelSummary s;
  s.model = spec.model;
  s.batch = batch;
  s.input = b.input;
  s.params = b.model->num_parameters();
  CachingAllocator& al = allocator_for(meta_device());
  s.forward_only_peak_bytes = forward_only_peak(b, batch, al);

  // Training forward with observers: per-layer outputs, saved storages, autocast decisions.
  LayerRecorder rec(*b.model);
  SavedTensorHooks hooks;
  hooks.pack = [&](const Tensor& t) { return rec.pack_hook(t); };
  hooks.unpack = [](const std::shared_ptr<void>& h) { return *static_cast<Tensor*>(h.get()); };
  AutocastObserverGuard audit([&](const char*, DType, DType to) { rec.on_autocast(to); });
  {
    nn::ForwardObserverGuard obs(
        [&](const nn::Module& m, const Tensor& in, const Tensor& out) { rec.on_forward(m, in, out); });
    SavedTensorHooksGuard guard(hooks);
    Tensor x = make_input(b, batch);
    al.reset_peak_stats();
    Tensor y = (*b.model)(x);
    s.training_forward_peak_bytes = al.stat("allocated_bytes.all.peak");
  }
  for (LayerRow& r : rec.rows) {
    s.activation_values_per_sample += r.output_values;
    if (!r.inplace) s.distinct_activation_values_per_sample += r.output_values;
    s.saved_bytes += r.saved_bytes;
  }
  for (const auto& [frame, bytes] : rec.pending) s.nonleaf_saved_bytes += bytes;
  fill_transformer_rows(rec.transformer_layers,
                        rec.transformer_layers.empty() ? 0 : bert_shape(spec.model, b.cfg).heads, rec.by_frame);
  s.transformer_layers = std::move(rec.transformer_layers);
  s.layers = std::move(rec.rows);
  return s;
}

nlohmann::json StepCost::to_json() const {
  return {{"flops", flops}, {"launches", launches}, {"allocated_bytes", allocated_bytes}};
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
                {"bytes_sent_per_step", ddp_bytes_sent}};
  if (graph_pool_bytes >= 0)
    j["cuda_graphs"] = {{"pool_bytes", graph_pool_bytes}, {"capture_peak_allocated_bytes", graph_capture_peak_bytes},
                        {"peak_reserved_bytes", graph_reserved_peak_bytes}};
  return j;
}

nlohmann::json CheckpointBudgetChoice::to_json() const {
  return {{"budget_bytes", budget}, {"policy", policy.spec}, {"predicted_peak_bytes", predicted_peak_bytes},
          {"tried", tried}};
}

void check_half_servable(const RunSpec& spec, int64_t batch, const std::string& optimizer, DeviceType target) {
  MetaEmulationGuard emulate(target);
  try {
    estimate_memory(spec, batch, optimizer);
  } catch (const NotImplementedError& e) {
    throw ValueError(str_cat("--half: ", spec.model, " cannot train in float16 on ", device_type_name(target), ": ",
                             e.what()));
  }
}

CheckpointBudgetChoice choose_checkpoint_budget(const RunSpec& spec, int64_t batch, const std::string& optimizer,
                                                uint64_t budget) {
  RunSpec s = spec;
  s.checkpoint = CheckpointPolicy{};
  size_t longest = 0;
  {
    reset_allocators();
    Built b = build_on_meta(s);
    for (const auto& chain : checkpoint_chains(*b.model, model_probe_input(s.model, b.cfg)))
      longest = std::max(longest, chain.size());
  }
  std::vector<std::string> candidates = {"none"};
  for (size_t k = longest > 0 ? longest - 1 : 0; k >= 1; --k) candidates.push_back("every:" + std::to_string(k));
  CheckpointBudgetChoice c;
  c.budget = budget;
  int64_t best = -1;
  std::string best_policy;
  for (const std::string& policy : candidates) {
    s.checkpoint = parse_checkpoint_policy(policy);
    const int64_t peak = estimate_memory(s, batch, optimizer).peak_allocated_bytes;
    c.tried.push_back({{"policy", policy}, {"peak_bytes", peak}});
    if (best < 0 || peak < best) { best = peak; best_policy = policy; }
    if (uint64_t(peak) <= budget) {
      c.policy = s.checkpoint;
      c.predicted_peak_bytes = peak;
      return c;
    }
  }
  throw ValueError(str_cat("--checkpoint budget:", format_bytes(double(budget)), " cannot be met by ", spec.model,
                           " at batch ", batch, " with ", optimizer, ": the smallest training peak a checkpoint plan "
                           "reaches is ", format_bytes(double(best)), " (", best, " bytes, --checkpoint ", best_policy,
                           "); give at least that, or a smaller --batch"));
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
    if (ddp->ddp.zero_stage() >= 2) e.grads_bytes += ddp->ddp.zero_bucket_shard_bytes();
    // stage 3: the parameters a rank keeps are its shards (their 16-bit twins of the masters)
    if (ddp->ddp.zero_stage() == 3) e.params_bytes = ddp->ddp.zero_bucket_shard_bytes();
  }
  for (const auto& [n, p] : model.named_parameters())
    if (p.grad().defined()) e.grads_bytes += int64_t(p.grad().nbytes());
  // What backward produces (the paper's gradients): one per parameter, or stage 2's shard sums.
  int64_t backward_grads = 0;
  if (ddp && ddp->ddp.zero_stage() >= 2) {
    backward_grads = ddp->ddp.zero_bucket_shard_bytes();
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
  // ZeRO's "model states" (Rajbhandari et al. 2020, Figure 1): parameters, the gradients
  // backward produces, optimizer state, masters and shards; not the step's float32 copies
  // of the gradients (MasterWeights' stay until the next zero_grad, ZeRO's are freed).
  e.model_state_bytes = e.params_bytes + backward_grads + e.optimizer_state_bytes + e.master_weights_bytes +
                        e.zero_shard_bytes;
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

MemoryEstimate estimate_memory(const RunSpec& spec, int64_t batch, const std::string& optimizer,
                               uint64_t device_memory, bool record) {
  OOMLAB_CHECK(batch >= 1, "--batch must be >= 1 (got ", batch, ")");
  // "Sum of layer outputs" as the source's table counts it: outputs that occupy memory
  // of their own (in-place ReLU and flatten views share their input's).
  // (at the run's batch: a one-sample training forward fails where BatchNorm sees a 1x1 map)
  const int64_t outputs = summarize_model(spec, batch).distinct_activation_values_per_sample;
  reset_allocators();
  allocator_for(meta_device()).set_capacity(device_memory);
  if (record) {
    allocator_for(meta_device()).record_history(true);
    OpProfiler::enable(true);
  }
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
                spec.zero_stage > 0 && spec.master_weights);
    e.ddp_bucket_bytes = ddp->ddp.bucket_bytes();
    e.zero_stage = spec.zero_stage;
  }
  ParamGroup g;
  g.params = ddp && spec.zero_stage > 0 ? ddp->ddp.optimizer_parameters()
             : masters                  ? masters->parameters()
                                        : b.model->named_parameters();
  g.lr = optimizer == "sgd" ? 0.1 : 1e-3;
  if (optimizer == "sgd") g.momentum = spec.momentum.value_or(0.9);   // estimate's --momentum default
  auto opt = make_optimizer(optimizer, {g});
  Tensor x = make_input(b, batch, spec.channels_last);
  Tensor y = make_target(b, batch);
  e.input_bytes = int64_t(x.nbytes() + y.nbytes());
  // The run's mixed precision: autocast and the loss scaler are part of the step.
  std::vector<StepStrategy*> strategies;
  if (ddp) strategies.push_back(&ddp->strategy);   // first, as the trainer orders it
  std::optional<AutocastStrategy> autocast;
  std::optional<GradScaler> scaler;
  if (spec.amp) strategies.push_back(&autocast.emplace(*spec.amp));
  if (half_io) strategies.push_back(&*half_io);
  if (masters) strategies.push_back(&*masters);
  if (spec.loss_scale.kind != LossScaleSpec::Kind::none) strategies.push_back(&scaler.emplace(spec.loss_scale));
  TrainStep step(*b.model, *opt, strategies);
  step.run(x, y);                       // step 1 creates optimizer state
  // The allocator's peaks from here on are step 2's: the results' `memory` block then
  // reports the estimate's own peak (metrics.exact.peak_allocated_bytes).
  allocator_for(meta_device()).reset_peak_stats();
  if (ddp) ddp->comm.reset_stats();     // the steady step's communication
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

  fill_source_formula(e, optimizer, batch, outputs, int64_t(x.nbytes()));
  if (record) OpProfiler::enable(false);
  if (spec.cuda_graphs) estimate_graph(step, x, y, s2, e);
  return e;
}

}  // namespace oomlab
