// layer_recorder.cpp — LayerRecorder (layer_recorder.h).
#include "experiments/plan/layer_recorder.h"

#include <regex>

#include "engine/memory/memory_export.h"

namespace oomlab {

namespace {
std::string current_layer() {   // the innermost frame without its phase ("layer1.0.bn1/fwd" -> "layer1.0.bn1")
  std::string frame = MemoryContext::current();
  if (auto p = frame.rfind('/'); p != std::string::npos) frame.resize(p);
  return frame;
}
}  // namespace

LayerRecorder::LayerRecorder(nn::Module& model) {
  for (const auto& [n, t] : model.named_parameters()) param_storages_.insert(t.storage().get());
}

std::shared_ptr<void> LayerRecorder::pack_hook(const Tensor& t) {
  const void* key = t.storage().get();
  if (!param_storages_.count(key) && seen_storages_.insert(key).second) {
    const std::string frame = current_layer();
    pending[frame] += int64_t(t.storage()->nbytes);
    by_frame[frame] += int64_t(t.storage()->nbytes);
  }
  return std::make_shared<Tensor>(t);
}

void LayerRecorder::on_autocast(DType to) { decided_[current_layer()].insert(dtype_name(to)); }

void LayerRecorder::on_forward(const nn::Module& m, const Tensor& in, const Tensor& out) {
  static const std::regex encoder_layer(R"(.*encoder\.layer\.[0-9]+)");
  if (!m.is_leaf_module()) {
    if ((std::string(m.type_name()) == "BertLayer" || std::regex_match(m.full_name(), encoder_layer)) &&
        in.defined() && in.dim() == 3) {
      TransformerLayerRow t;
      t.name = m.full_name();
      t.batch = in.size(0); t.seq = in.size(1); t.hidden = in.size(2);
      transformer_layers.push_back(t);
    }
    return;
  }
  LayerRow r;
  r.name = m.full_name();
  r.type = m.type_name();
  r.output_shape = Shape(out.shape().begin() + 1, out.shape().end());
  r.output_values = shape_numel(r.output_shape);
  r.params = m.num_parameters();
  r.output_bytes = int64_t(out.nbytes());
  r.inplace = in.defined() && in.storage() == out.storage();
  r.output_dtype = dtype_name(out.dtype());
  if (auto it = decided_.find(r.name); it != decided_.end()) {
    for (const std::string& d : it->second) r.compute_dtype += (r.compute_dtype.empty() ? "" : "+") + d;
    decided_.erase(it);   // a module called twice gets each call's decisions
  } else {
    r.compute_dtype = r.output_dtype;
  }
  if (auto it = pending.find(r.name); it != pending.end()) {
    r.saved_bytes = it->second;
    pending.erase(it);
  }
  rows.push_back(r);
}

}  // namespace oomlab
