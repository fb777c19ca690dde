// memory_report.h — `oomlab summary` and `oomlab estimate` as library calls.
// summarize_model: per leaf layer output shape, params, output bytes and the bytes it
//   saves for backward (measured with saved-tensor hooks: each storage counted once, for
//   the first layer that saves it; parameters excluded), on the meta device.
// estimate_memory: the source's formula (params*4*n + batch*outputs*4*2 + input,
//   n = 2 SGD / 4 Adam) next to the exact meta-device peak of a steady-state training
//   step (the second step: optimizer state exists), component by component.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/core/tensor.h"

namespace oomlab {

struct LayerRow {
  std::string name, type;
  Shape output_shape;            // per sample (batch dim dropped)
  int64_t output_values = 0;     // per sample
  int64_t params = 0;
  int64_t output_bytes = 0;      // whole batch
  int64_t saved_bytes = 0;       // whole batch, activations saved for backward
  bool inplace = false;          // output shares its input's storage (relu_, flatten view)
};

struct ModelSummary {
  std::string model;
  int64_t batch = 1;
  Shape input;                         // C,H,W
  std::vector<LayerRow> layers;
  int64_t params = 0;
  int64_t activation_values_per_sample = 0;   // sum of leaf-layer outputs
  int64_t distinct_activation_values_per_sample = 0;  // same, minus in-place/view outputs
  int64_t saved_bytes = 0;                    // sum of saved_bytes
  int64_t forward_only_peak_bytes = 0;        // no_grad forward, allocated peak
  int64_t training_forward_peak_bytes = 0;    // grad-enabled forward, allocated peak
  nlohmann::json to_json() const;
};

struct ModelSpec {
  std::string model;
  Shape input;           // C,H,W; empty -> model default
  int64_t num_classes = 0;   // 0 -> model default (1000 ImageNet / 10 for 28x28 models)
};

ModelSummary summarize_model(const ModelSpec& spec, int64_t batch);

struct MemoryEstimate {
  std::string model, optimizer;
  int64_t batch = 0;
  int64_t params = 0;
  int64_t outputs_per_sample = 0;
  // exact, from the allocator (meta device)
  int64_t params_bytes = 0, buffers_bytes = 0, grads_bytes = 0, optimizer_state_bytes = 0,
          input_bytes = 0, activation_bytes = 0, transient_bytes = 0, peak_allocated_bytes = 0,
          peak_reserved_bytes = 0;
  // the source's formula
  int64_t formula_params_bytes = 0, formula_activation_bytes = 0, formula_input_bytes = 0,
          formula_bytes = 0;
  double formula_error_pct = 0;   // (formula - exact) / exact * 100
  nlohmann::json to_json() const;
};

// record: keep the meta allocator's trace and op spans (for --memory-snapshot /
// --chrome-trace); read them from allocator_for(meta_device()) afterwards.
MemoryEstimate estimate_memory(const ModelSpec& spec, int64_t batch, const std::string& optimizer,
                               uint64_t device_memory = 0, bool record = false);

// The default input (C,H,W) and class count for a model name.
Shape default_input_for(const std::string& model);
int64_t default_classes_for(const std::string& model);

}  // namespace oomlab
