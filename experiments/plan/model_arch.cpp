// model_arch.cpp — the model-use table (which models a model-specific flag applies to),
// validation, application and recording of architecture overrides.
#include "experiments/plan/model_arch.h"

#include <map>

#include "engine/core/error.h"
#include "models/graph_model.h"
#include "models/model_zoo.h"

namespace oomlab {

namespace {
bool is_bert(const std::string& model) { return model_input_kind(model) == InputKind::tokens; }
bool is_unet(const std::string& model) { return model_task_kind(model) == TaskKind::segmentation; }
bool is_zoo(const std::string& model) { return !is_graph_model(model); }
bool is_resnet(const std::string& model) { return is_zoo(model) && model.rfind("resnet", 0) == 0; }
bool is_vgg(const std::string& model) { return is_zoo(model) && model.rfind("vgg", 0) == 0; }
// An imported graph with a scaled_dot_product_attention node (ViT, BERT, GPT-2 exports).
bool graph_has_attention(const std::string& model) {
  if (!is_graph_model(model)) return false;
  for (const GraphNode& n : graph_of_model(model).nodes)
    if (n.op == "aten.scaled_dot_product_attention.default") return true;
  return false;
}
}  // namespace

const std::vector<ModelUse>& model_uses() {
  static const std::vector<ModelUse> uses = {
      {"bert-shape", "BERT models of the zoo (bert-*; an imported graph's shape is the exported file's)",
       [](const std::string& m) { return is_zoo(m) && is_bert(m); }},
      {"unet-shape", "UNet models (unet, unet-small)", [](const std::string& m) { return is_zoo(m) && is_unet(m); }},
      {"dropout", "BERT models (bert-*) and the VGG classifier (vgg*) of the zoo (an imported graph is its eval "
                  "export, without dropout)",
       [](const std::string& m) { return is_zoo(m) && (is_bert(m) || is_vgg(m)); }},
      {"norm", "the ResNets (resnet18/34/50, resnet20/56: torchvision's norm_layer)", is_resnet},
      {"fuse-relu", "the ResNets (resnet18/34/50, resnet20/56) and the VGGs (vgg11/16, *_bn)",
       [](const std::string& m) { return is_resnet(m) || is_vgg(m); }},
      {"attention", "BERT models (bert-*) and imported graphs with attention",
       [](const std::string& m) { return is_zoo(m) ? is_bert(m) : graph_has_attention(m); }},
      {"classes", "the zoo's models (an imported graph's classes are those of its exported output)", is_zoo},
      {"padding", "models that mask padded tokens: BERT models (bert-*) and graphs exported with an attention mask",
       [](const std::string& m) { return is_zoo(m) ? is_bert(m) : graph_has_mask_input(graph_of_model(m)); }},
  };
  return uses;
}

void check_model_use(const std::string& flag, const std::string& use, const std::string& model) {
  model_input_kind(model);   // an unknown model is named as such first (the valid ones listed)
  for (const ModelUse& u : model_uses())
    if (u.name == use) {
      OOMLAB_CHECK(u.has(model), "--", flag, " applies to ", u.owners, "; --model ", model, " is not one");
      return;
    }
  throw InternalError(str_cat("--", flag, ": the flag table names model use '", use, "', which model_uses lacks"));
}

const std::vector<std::pair<std::string, std::string>>& arch_flag_uses() {
  static const std::vector<std::pair<std::string, std::string>> uses = {
      {"hidden", "bert-shape"}, {"layers", "bert-shape"}, {"heads", "bert-shape"}, {"max-positions", "bert-shape"},
      {"base-width", "unet-shape"}, {"depth", "unet-shape"}, {"dropout", "dropout"}, {"norm", "norm"},
      {"fuse-relu", "fuse-relu"}, {"attention", "attention"}};
  return uses;
}

void ArchOverrides::check_fits(const std::string& model) const {
  const std::map<std::string, bool> given = {
      {"hidden", hidden != 0},         {"layers", layers != 0},           {"heads", heads != 0},
      {"max-positions", max_positions != 0}, {"base-width", base_width != 0}, {"depth", depth != 0},
      {"dropout", dropout >= 0},       {"norm", !norm.empty()},           {"fuse-relu", !fuse_relu.empty()},
      {"attention", !attention.empty()}};
  for (const auto& [flag, use] : arch_flag_uses())
    if (given.at(flag)) check_model_use(flag, use, model);
}

void ArchOverrides::apply(ModelConfig& cfg) const {
  if (hidden > 0) cfg.hidden = hidden;
  if (layers > 0) cfg.layers = layers;
  if (heads > 0) cfg.heads = heads;
  if (max_positions > 0) cfg.max_positions = max_positions;
  if (dropout >= 0) cfg.dropout = cfg.classifier_dropout = dropout;   // the model reads its own
  if (base_width > 0) cfg.base_width = base_width;
  if (depth > 0) cfg.depth = depth;
  if (norm == "gn") cfg.norm = nn::NormKind::group;
  if (norm == "none") cfg.norm = nn::NormKind::none;
  cfg.fused_attention = attention == "fused";
  cfg.fuse_relu = fuse_relu == "on";
}

nlohmann::json ArchOverrides::to_json(const std::string& model) const {
  nlohmann::json j = nlohmann::json::object();
  try {
    if (is_bert(model)) {
      const ModelConfig d = default_model_config(model);
      const BertShape preset = bert_shape(model, d);   // no overrides: always valid
      j = {{"hidden", hidden > 0 ? hidden : preset.hidden}, {"layers", layers > 0 ? layers : preset.layers},
           {"heads", heads > 0 ? heads : preset.heads},
           {"max_positions", max_positions > 0 ? max_positions : preset.max_positions},
           {"dropout", dropout >= 0 ? dropout : d.dropout}, {"attention", attention.empty() ? "eager" : attention}};
    } else if (is_unet(model)) {
      const ModelConfig d = default_model_config(model);
      j = {{"base_width", base_width > 0 ? base_width : unet_base_width(model, d)},
           {"depth", depth > 0 ? depth : unet_depth(model, d)}};
    } else if (is_vgg(model)) {
      j = {{"dropout", dropout >= 0 ? dropout : default_model_config(model).classifier_dropout}};
    } else if (is_resnet(model)) {
      j = {{"norm", norm.empty() ? "bn" : norm}};
      if (fuse_relu == "on") j["fuse_relu"] = true;   // absent: off (results before the flag)
    }
  } catch (const Error&) {   // unknown model: nothing to resolve (building it reports that)
  }
  return j;
}

void check_seq_fits(const std::string& model, const ArchOverrides& arch, int64_t len, const char* flag) {
  if (!is_bert(model)) return;
  const int64_t table = arch.max_positions > 0 ? arch.max_positions
                                               : bert_shape(model, default_model_config(model)).max_positions;
  OOMLAB_CHECK(len <= table, flag, " ", len, " exceeds max_positions ", table, " of ", model,
               " (its position-embedding table); use a shorter sequence, or pass --max-positions ", len,
               " to enlarge the table (the parameter count then differs from Hugging Face's)");
}

}  // namespace oomlab
