// layer_recorder.h — what `oomlab summary` records during one training forward on meta
// (memory_report.cpp): a row per leaf-module call (output shape and bytes, in-place or not,
// the bytes it saved for backward, the dtypes autocast decided in it) and a row per
// transformer layer (its input's batch, sequence and hidden sizes).
// Saved bytes: a storage is counted once, for the module call (the innermost MemoryContext
// frame) that first saves it; parameters are not activations. `pending` holds a frame's
// bytes since its last call ended; a leaf module's call takes them when its forward returns
// (leaf modules do not nest), so a module called twice (ResNet's shared relu, UNet's pool)
// gets one row per call with that call's bytes. What remains pending was saved by code in
// non-leaf modules. `by_frame` keeps every frame's total for the transformer rows.
// Use: install pack_hook() as the saved-tensor pack hook, on_autocast() as the autocast
// observer and on_forward() as the forward observer for the forward, then read the members.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/nn/module.h"
#include "experiments/plan/memory_report.h"

namespace oomlab {

class LayerRecorder {
 public:
  explicit LayerRecorder(nn::Module& model);
  std::shared_ptr<void> pack_hook(const Tensor& t);
  void on_autocast(DType to);
  void on_forward(const nn::Module& m, const Tensor& in, const Tensor& out);

  std::vector<LayerRow> rows;
  std::vector<TransformerLayerRow> transformer_layers;
  std::unordered_map<std::string, int64_t> pending, by_frame;

 private:
  std::set<const void*> param_storages_, seen_storages_;
  std::unordered_map<std::string, std::set<std::string>> decided_;   // frame -> autocast dtypes
};

}  // namespace oomlab
