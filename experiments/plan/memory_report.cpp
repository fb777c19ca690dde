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
#include "engine/nn/checkpoint_plan.h"
#include "engine/nn/forward_observer.h"
#include "engine/core/byte_sizes.h"
#include "experiments/plan/layer_recorder.h"
#include "experiments/plan/meta_model.h"
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

}  // namespace oomlab
