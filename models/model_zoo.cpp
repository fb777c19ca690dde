// model_zoo.cpp — name -> family builder dispatch, per-model default inputs (image or
// token shapes, input/task kinds), and the torchvision weight init shared by the CNN
// families (see model_zoo.h for the contracts).
#include "models/model_zoo.h"

#include <cmath>

#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "models/graph_model.h"

namespace oomlab {

namespace {
enum class Family { vgg, resnet, cifar_resnet, mlp, bert, unet, tiny_ff, graph };   // graph: --model graph:FILE
bool graph_tokens(const std::string& name) { return graph_of_model(name).inputs.at(0).dtype == "int64"; }
struct Entry { const char* name; Family family; };
constexpr Entry kModels[] = {
    {"vgg11", Family::vgg},       {"vgg11_bn", Family::vgg},     {"vgg16", Family::vgg},
    {"vgg16_bn", Family::vgg},    {"resnet18", Family::resnet},  {"resnet34", Family::resnet},
    {"resnet50", Family::resnet}, {"resnet20", Family::cifar_resnet}, {"resnet56", Family::cifar_resnet},
    {"mlp", Family::mlp},         {"bert-tiny", Family::bert},   {"bert-mini", Family::bert},
    {"bert-small", Family::bert}, {"bert-base", Family::bert},   {"unet", Family::unet},
    {"unet-small", Family::unet}, {"tiny-ff", Family::tiny_ff},
};

Family family_of(const std::string& name) {
  if (is_graph_model(name)) {
    graph_of_model(name);   // a missing or malformed file is named here
    return Family::graph;
  }
  for (const Entry& e : kModels)
    if (name == e.name) return e.family;
  std::string valid;
  for (const Entry& e : kModels) valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  throw ValueError(str_cat("unknown model '", name, "'; valid models: ", valid));
}
}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (const Entry& e : kModels) out.emplace_back(e.name);
  return out;
}

int64_t default_image_size(const std::string& name) {
  Family f = family_of(name);
  if (f == Family::graph) return graph_tokens(name) ? 0 : graph_model_config(name).height;
  if (f == Family::bert) return 0;   // token model: no image
  if (f == Family::unet) return name == "unet-small" ? 64 : 256;
  return (f == Family::cifar_resnet || f == Family::mlp || f == Family::tiny_ff) ? 28 : 224;
}

int64_t default_in_channels(const std::string& name) {
  Family f = family_of(name);
  if (f == Family::graph) return graph_tokens(name) ? 0 : graph_model_config(name).in_channels;
  if (f == Family::bert) return 0;
  return (f == Family::cifar_resnet || f == Family::mlp || f == Family::tiny_ff) ? 1 : 3;
}

ModelConfig default_model_config(const std::string& name) {
  ModelConfig cfg;
  Family f = family_of(name);
  if (f == Family::graph) return graph_model_config(name);
  if (f == Family::bert) {   // image fields stay at their (unused) defaults
    cfg.seq_len = 128;
    cfg.num_classes = 2;
    return cfg;
  }
  cfg.in_channels = default_in_channels(name);
  cfg.height = cfg.width = default_image_size(name);
  if (f == Family::unet) cfg.num_classes = 2;
  return cfg;
}

int64_t min_image_size(const std::string& name) {
  Family f = family_of(name);
  if (f == Family::graph) return graph_model_config(name).height;   // the export's size
  if (f == Family::unet) return int64_t(1) << 4;   // the preset depth; build checks divisibility
  return f == Family::vgg ? 32 : 1;
}

InputKind model_input_kind(const std::string& name) {
  if (family_of(name) == Family::graph) return graph_tokens(name) ? InputKind::tokens : InputKind::image;
  return family_of(name) == Family::bert ? InputKind::tokens : InputKind::image;
}

TaskKind model_task_kind(const std::string& name) {
  return family_of(name) == Family::unet ? TaskKind::segmentation : TaskKind::classification;
}

Shape model_input_shape(const std::string& name, const ModelConfig& cfg, int64_t batch) {
  if (model_input_kind(name) == InputKind::tokens)
    return {batch, family_of(name) == Family::graph ? cfg.seq_len : bert_shape(name, cfg).seq_len};
  return {batch, cfg.in_channels, cfg.height, cfg.width};
}

Tensor model_probe_input(const std::string& name, const ModelConfig& cfg) {
  const bool tokens = model_input_kind(name) == InputKind::tokens;
  return Tensor::full(model_input_shape(name, cfg, 1), tokens ? 1.0 : 0.0, tokens ? DType::i64 : DType::f32,
                      cfg.device);
}

namespace {
// A graph's sizes are the export's: the input must match them (the batch may differ).
nn::ModulePtr build_graph(const std::string& name, const ModelConfig& cfg) {
  const ModelConfig g = graph_model_config(name);
  if (graph_tokens(name))
    OOMLAB_CHECK_T(ShapeError, cfg.seq_len == g.seq_len, name, ": sequence length ", cfg.seq_len,
                   " differs from the exported ", g.seq_len, "; use --seq-len ", g.seq_len,
                   " or export the model again with --input-shape N,", cfg.seq_len);
  else
    OOMLAB_CHECK_T(ShapeError, cfg.in_channels == g.in_channels && cfg.height == g.height && cfg.width == g.width,
                   name, ": input ", cfg.in_channels, "x", cfg.height, "x", cfg.width, " differs from the exported ",
                   g.in_channels, "x", g.height, "x", g.width, "; export the model again with --input-shape N,",
                   cfg.in_channels, ",", cfg.height, ",", cfg.width);
  return build_graph_model(graph_of_model(name), cfg);
}
}  // namespace

nn::ModulePtr build_model(const std::string& name, const ModelConfig& cfg) {
  Family f = family_of(name);
  OOMLAB_CHECK(cfg.num_classes > 0, name, ": num_classes must be > 0, got ", cfg.num_classes);
  OOMLAB_CHECK_T(DTypeError, dtype_is_floating(cfg.dtype), name, ": model dtype must be floating, got ",
                 dtype_name(cfg.dtype));
  OOMLAB_CHECK(cfg.norm == nn::NormKind::batch || name.rfind("resnet", 0) == 0, "--norm applies to the ResNets ",
               "(torchvision's norm_layer: resnet18/34/50, resnet20/56); ", name, " keeps its own normalisation");
  if (f == Family::bert) return build_bert(name, cfg);   // token input: no image checks
  if (f == Family::graph) return build_graph(name, cfg);
  OOMLAB_CHECK(cfg.in_channels > 0, name, ": in_channels must be > 0, got ", cfg.in_channels);
  if (f == Family::unet) return build_unet(name, cfg);    // checks divisibility by 2^depth
  check_min_input(name, cfg.in_channels, cfg.height, cfg.width, min_image_size(name),
                  f == Family::vgg ? "its 5 max-pools halve the size 5 times" : "");
  switch (f) {
    case Family::vgg: return build_vgg(name, cfg);
    case Family::resnet: return build_resnet(name, cfg);
    case Family::cifar_resnet: return build_cifar_resnet(name, cfg);
    case Family::mlp: return build_mlp(name, cfg);
    case Family::tiny_ff: return build_tiny_ff(name, cfg);
    case Family::bert: return build_bert(name, cfg);
    case Family::unet: return build_unet(name, cfg);
    case Family::graph: return build_graph(name, cfg);
  }
  throw InternalError("build_model: unhandled family");
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
