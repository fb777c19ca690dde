// model_zoo.cpp — the zoo's questions answered from the model table (model_table.h): names,
// default inputs, input and task kinds, the builder with its input checks; and the
// torchvision weight init shared by the CNN families (see model_zoo.h for the contracts).
#include "models/model_zoo.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "models/graph_model.h"
#include "models/model_table.h"

namespace oomlab {

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (const ModelEntry& e : zoo_table()) out.push_back(e.name);
  return out;
}

int64_t default_image_size(const std::string& name) {
  const ModelEntry e = model_entry(name);
  return e.input == InputKind::tokens ? 0 : e.defaults.height;
}

int64_t default_in_channels(const std::string& name) {
  const ModelEntry e = model_entry(name);
  return e.input == InputKind::tokens ? 0 : e.defaults.in_channels;
}

ModelConfig default_model_config(const std::string& name) { return model_entry(name).defaults; }

int64_t min_image_size(const std::string& name) { return model_entry(name).min_image_size; }

InputKind model_input_kind(const std::string& name) { return model_entry(name).input; }

TaskKind model_task_kind(const std::string& name) { return model_entry(name).task; }

Shape model_input_shape(const std::string& name, const ModelConfig& cfg, int64_t batch) {
  const ModelEntry e = model_entry(name);
  if (e.input == InputKind::tokens) return {batch, e.is_graph() ? cfg.seq_len : bert_shape(name, cfg).seq_len};
  return {batch, cfg.in_channels, cfg.height, cfg.width};
}

Tensor model_probe_input(const std::string& name, const ModelConfig& cfg) {
  const bool tokens = model_input_kind(name) == InputKind::tokens;
  return Tensor::full(model_input_shape(name, cfg, 1), tokens ? 1.0 : 0.0, tokens ? DType::i64 : DType::f32,
                      cfg.device);
}

nn::ModulePtr build_model(const std::string& name, const ModelConfig& cfg) {
  const ModelEntry e = model_entry(name);
  OOMLAB_CHECK(cfg.num_classes > 0, name, ": num_classes must be > 0, got ", cfg.num_classes);
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(cfg.dtype), name, ": model dtype must be floating, got ",
                 dtype_name(cfg.dtype));
  OOMLAB_CHECK(cfg.norm == nn::NormKind::batch || e.has_use("norm"), "--norm applies to the ResNets ",
               "(torchvision's norm_layer: resnet18/34/50, resnet20/56); ", name, " keeps its own normalisation");
  if (e.input == InputKind::image && !e.is_graph()) {   // a graph checks the export's sizes itself
    OOMLAB_CHECK(cfg.in_channels > 0, name, ": in_channels must be > 0, got ", cfg.in_channels);
    if (e.task == TaskKind::classification)   // unet checks divisibility by 2^depth itself
      check_min_input(name, cfg.in_channels, cfg.height, cfg.width, e.min_image_size, e.min_size_why.c_str());
  }
  return e.build(name, cfg);
}

void check_min_input(const std::string& model, int64_t c, int64_t h, int64_t w, int64_t min_size,
                     const char* why) {
  OOMLAB_CHECK_T(ShapeError, h >= min_size && w >= min_size, model, ": input ", c, "x", h, "x", w,
                 " is too small; height and width must be >= ", min_size,
                 (why && *why) ? str_cat(" (", why, ")") : std::string(),
                 "; resize or pad the images, or pick a model for small inputs (resnet20, resnet18)");
}

nn::LayerOptions zoo_layer_options(const ModelConfig& cfg) {
  nn::LayerOptions o;
  o.device = cfg.device;
  o.dtype = cfg.dtype;
  o.norm = cfg.norm;
  o.skip_init = true;
  o.fused_attention = cfg.fused_attention;
  o.fuse_relu = cfg.fuse_relu;
  return o;
}

void init_torchvision_weights(nn::Module& model, const ModelConfig& cfg, LinearInit linear) {
  if (cfg.device.is_meta()) return;
  Generator gen{cfg.seed, 0};
  for (auto& [name, m] : model.named_modules()) {
    if (auto* conv = dynamic_cast<nn::Conv2d*>(m)) {
      nn::init::kaiming_normal_fan_out_relu_(conv->weight, gen);
      if (conv->bias.defined()) nn::init::constant_(conv->bias, 0.0);
    } else if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(m)) {
      nn::init::constant_(bn->weight, 1.0);
      nn::init::constant_(bn->bias, 0.0);
    } else if (auto* fc = dynamic_cast<nn::Linear*>(m)) {
      if (linear == LinearInit::normal_0_01) {
        nn::init::normal_(fc->weight, 0.0, 0.01, gen);
        if (fc->bias.defined()) nn::init::constant_(fc->bias, 0.0);
      } else {
        fc->reset_parameters(gen);
      }
    }
  }
}

}  // namespace oomlab
