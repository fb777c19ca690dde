// memory_report.h — `oomlab summary` and `oomlab estimate` as library calls.
// summarize_model: one row per leaf-module call (a module called twice per forward, like
//   ResNet's shared relu, has two rows): output shape, params, output bytes and the bytes
//   that call saves for backward (measured with saved-tensor hooks: each storage counted
//   once, for the call that first saves it; parameters excluded), on the meta device.
// estimate_memory: the source's formula (params*4*n + batch*outputs*4*2 + input,
//   n = 2 SGD / 4 Adam) next to the exact meta-device peak of a steady-state training
//   step (the second step: optimizer state exists), component by component.
// Inputs follow model_input_kind/model_input_shape: float [B,C,H,W] images or int64
// [B, seq_len] token ids (on meta nothing is read, so the ids' values do not matter);
// targets are [B] labels or [B,H,W] masks per model_task_kind.
// Transformer encoder layers (BERT's bert.encoder.layer.N) also get a row in
// ModelSummary::transformer_layers: the measured saved bytes of everything that ran inside
// the layer next to Korthikanti et al. 2022's per-layer activation formula (see the .cpp).
#pragma once
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/nn/checkpoint_plan.h"
#include "experiments/plan/peak_by_module.h"
#include "experiments/plan/run_spec.h"

namespace oomlab {

struct LayerRow {
  std::string name, type;
  Shape output_shape;            // per sample (batch dim dropped)
  int64_t output_values = 0;     // per sample
  int64_t params = 0;
  int64_t output_bytes = 0;      // whole batch
  int64_t saved_bytes = 0;       // whole batch: storages this call saved first (each once)
  bool inplace = false;          // output shares its input's storage (relu_, flatten view)
  // The dtype the layer computes in: under --amp, what the autocast policy decided for the
  // ops inside it ("float16", "float32", "float16+float32" when they differ); without a
  // decision (or --amp off), its output's dtype. Also the output's dtype.
  std::string compute_dtype, output_dtype;
};

// One transformer layer: measured vs Korthikanti et al. 2022 ("Reducing Activation
// Recomputation in Large Transformer Models", eq. 1: s*b*h*(34 + 5*a*s/h) bytes, fp16).
struct TransformerLayerRow {
  std::string name;
  int64_t seq = 0, batch = 0, hidden = 0, heads = 0;
  int64_t saved_bytes = 0;              // measured: all storages first saved inside the layer
  int64_t korthikanti_fp16_bytes = 0;   // s*b*h*(34 + 5*a*s/h)
  int64_t korthikanti_fp32_bytes = 0;   // s*b*h*(66 + 9*a*s/h): 2-byte terms doubled
};

struct ModelSummary {
  std::string model;
  int64_t batch = 1;
  Shape input;                         // C,H,W (images) or T (tokens)
  std::vector<LayerRow> layers;
  int64_t params = 0;
  int64_t activation_values_per_sample = 0;   // sum of leaf-layer outputs
  int64_t distinct_activation_values_per_sample = 0;  // same, minus in-place/view outputs
  int64_t saved_bytes = 0;                    // sum of saved_bytes
  // Saved by ops called directly in a non-leaf module's forward (none in the zoo's BERT:
  // its attention core is the leaf attention.self.core), not in any row; saved_bytes +
  // this = everything saved.
  int64_t nonleaf_saved_bytes = 0;
  std::vector<TransformerLayerRow> transformer_layers;
  int64_t forward_only_peak_bytes = 0;        // no_grad forward, allocated peak
  int64_t training_forward_peak_bytes = 0;    // grad-enabled forward, allocated peak
  nlohmann::json to_json() const;
};


ModelSummary summarize_model(const RunSpec& spec, int64_t batch);

// The steady step's work as a meta step counts it (engine/core/flop_counter.h): matrix
// FLOPs by kind ("gemm", "conv", "conv_channels_last", "attention") and dtype, kernel
// launches, and the bytes its allocations took (the allocator's allocated_bytes.all.allocated
// over the step: every tensor an op wrote). The planner's time model reads it (time_model.h).
struct StepCost {
  std::map<std::string, std::map<std::string, double>> flops;
  int64_t launches = 0;
  int64_t allocated_bytes = 0;
  nlohmann::json to_json() const;
};

// spec.parallel dp | bdp: one device of the DataParallel step (dp_on_meta.h): its chunk, its
// steady-step peaks, and the work its thread did in the parallel phases (its replica's
// forward and backward; data_parallel.h). Device 0 also holds the whole input, the gathered
// outputs, the loss, the reduced gradients and the optimizer state.
struct DpDeviceEstimate {
  std::string device;
  int64_t chunk = 0, peak_allocated_bytes = 0, peak_reserved_bytes = 0;
  StepCost work;
  nlohmann::json to_json() const;
};

struct MemoryEstimate {
  std::string model, optimizer;
  int64_t batch = 0;
  int64_t params = 0;
  int64_t outputs_per_sample = 0;
  // exact, from the allocator (meta device)
  // master_weights_bytes: --master-weights' float32 copies (their gradients count in grads_bytes)
  int64_t params_bytes = 0, buffers_bytes = 0, grads_bytes = 0, optimizer_state_bytes = 0, master_weights_bytes = 0,
          input_bytes = 0, activation_bytes = 0, transient_bytes = 0, peak_allocated_bytes = 0,
          peak_reserved_bytes = 0;
  // --cuda-graphs: the third step captured as the trainer captures it (engine/train/
  // graphed_step.h) after the two eager ones: its private pool, its allocated peak, and
  // the reserved peak over the whole estimate (what the card must hold); -1 without.
  int64_t graph_pool_bytes = -1, graph_capture_peak_bytes = -1, graph_reserved_peak_bytes = -1;
  // the source's formula
  int64_t formula_params_bytes = 0, formula_activation_bytes = 0, formula_input_bytes = 0,
          formula_bytes = 0;
  double formula_error_pct = 0;   // (formula - exact) / exact * 100
  // The steady step's matrix FLOPs (GEMM, convolution, fused attention; forward, backward
  // and any recompute) by the dtype they ran in (engine/core/flop_counter.h).
  std::map<std::string, double> step_flops;
  StepCost step_cost;
  // spec.parallel == ddp: one rank's gradient buckets (ddp_on_meta.h), in launch order;
  // their bytes are in the peak. Empty without DDP.
  std::vector<int64_t> ddp_bucket_bytes;
  int64_t ddp_buckets_total_bytes() const;
  // spec.zero_stage > 0: the rank's shards (the optimizer's copy of its elements; their
  // gradients count in grads_bytes); ZeRO's buckets exist only while reduced, so their
  // bytes are in the peak only then. bytes_sent: this rank's over the steady step, as a
  // ring sends them (meta_comm.h).
  int zero_stage = 0;
  int64_t zero_shard_bytes = 0, ddp_bytes_sent = 0;
  // spec.offload: the bytes of what the rank keeps on the host after the step (its optimizer
  // shards and state; with params its parameter shards), and the host allocator's peak over
  // the step (the gradients copied there, its block rounding); the device's fields above then
  // leave those out (0).
  int64_t offload_host_bytes = 0, offload_host_peak_bytes = 0;
  // ... and the bytes its copies move through the host link: per micro-step (stages 2-3: the
  // gradient shard to the host; params: the parameter shards to the device, for forward and
  // for backward) and per optimizer step (the updated shard back; stage 1: its gradient too).
  int64_t offload_micro_copy_bytes = 0, offload_step_copy_bytes = 0;
  // Parameters + the gradients backward produces + optimizer state + masters + ZeRO shards:
  // the paper's "model states" (stage 2's gradients are the shard backward sums into; the
  // masters' float32 gradient copies are the step's, left out).
  int64_t model_state_bytes = 0;
  // spec.parallel dp | bdp: every device (dp_on_meta.h); the peaks above and step_cost /
  // step_flops are device 0's (the calling thread's work, which runs there, and its own
  // thread's). Empty otherwise.
  std::vector<DpDeviceEstimate> dp_devices;
  // by_module: the steady step's peak by module and category (peak_by_module.h); device 0's
  std::optional<PeakByModule> by_module;
  int64_t dp_max_peak_reserved_bytes() const;   // the fullest device's
  nlohmann::json to_json() const;
};

// record: keep the meta allocator's trace and op spans (for --memory-snapshot /
// --chrome-trace); read them from allocator_for(meta_device()) afterwards. by_module: also
// attribute the steady step's peak to modules (MemoryEstimate::by_module).
// spec.parallel ddp: one rank's step under DistributedDataParallel at spec.bucket_cap, batch
// the rank's own (as train's --batch). spec.parallel dp | bdp: the whole step over
// spec.devices meta devices, batch the step's (split as DataParallel splits it; bdp: device
// 0 gets spec.gpu0_bsz of it); device_memory caps every device.
MemoryEstimate estimate_memory(const RunSpec& spec, int64_t batch, const std::string& optimizer,
                               uint64_t device_memory = 0, bool record = false, bool by_module = false);

// --checkpoint budget:SIZE: the chain policy with the least recompute whose exact meta
// peak (one training step at `batch` with `optimizer`) fits `budget`: none first, then
// every:K for K from the longest block chain's length - 1 down to 1 (a larger K leaves a
// longer last segment un-checkpointed: fewer blocks re-run). spec.checkpoint is ignored.
// ValueError naming the smallest peak any of them reaches when none fits.
struct CheckpointBudgetChoice {
  uint64_t budget = 0;
  CheckpointPolicy policy;             // the concrete policy chosen
  int64_t predicted_peak_bytes = 0;    // its exact meta peak
  nlohmann::json tried = nlohmann::json::array();   // [{"policy", "peak_bytes"}], in order
  nlohmann::json to_json() const;
};
CheckpointBudgetChoice choose_checkpoint_budget(const RunSpec& spec, int64_t batch, const std::string& optimizer,
                                                uint64_t budget);

// --half pre-flight: one training step of `spec` at `batch` on meta emulating `target`'s
// kernel tables (engine/core/dispatch.h); an op with no float16 kernel there is a ValueError
// naming the model, the device and the op, raised before any real work.
void check_half_servable(const RunSpec& spec, int64_t batch, const std::string& optimizer, DeviceType target);

// The default input (C,H,W) and class count for a model name.
Shape default_input_for(const std::string& model);
int64_t default_classes_for(const std::string& model);

}  // namespace oomlab
