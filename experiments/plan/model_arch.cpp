// model_arch.cpp — the model-use table (which models a model-specific flag applies to),
// validation, application and recording of architecture overrides.
#include "experiments/plan/model_arch.h"

#include <map>

#include "engine/core/error.h"
#include "models/graph_model.h"
#include "models/model_table.h"
#include "models/model_zoo.h"

namespace oomlab {


const std::vector<ModelUse>& model_uses() {
  static const std::vector<ModelUse> uses = {
      {"bert-shape", "BERT models of the zoo (bert-*; an imported graph's shape is the exported file's)"},
      {"unet-shape", "UNet models (unet, unet-small)"},
      {"dropout", "BERT models (bert-*) and the VGG classifier (vgg*) of the zoo (an imported graph is its eval "
                  "export, without dropout)"},
      {"norm", "the ResNets (resnet18/34/50, resnet20/56: torchvision's norm_layer)"},
      {"fuse-relu", "the ResNets (resnet18/34/50, resnet20/56) and the VGGs (vgg11/16, *_bn)"},
      {"attention", "BERT models (bert-*) and imported graphs with attention"},
      {"classes", "the zoo's models (an imported graph's classes are those of its exported output)"},
      {"padding", "models that mask padded tokens: BERT models (bert-*) and graphs exported with an attention mask"},
  };
  return uses;
}

void check_model_use(const std::string& flag, const std::string& use, const std::string& model) {
  const ModelEntry entry = model_entry(model);   // an unknown model is named as such first (the valid ones listed)
  for (const ModelUse& u : model_uses())
    if (u.name == use) {
      OOMLAB_CHECK(entry.has_use(use), "--", flag, " applies to ", u.owners, "; --model ", model, " is not one");
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
    const ModelEntry e = model_entry(model);
    if (e.input == InputKind::tokens) {
      const ModelConfig d = default_model_config(model);
      const BertShape preset = bert_shape(model, d);   // no overrides: always valid
      j = {{"hidden", hidden > 0 ? hidden : preset.hidden}, {"layers", layers > 0 ? layers : preset.layers},
           {"heads", heads > 0 ? heads : preset.heads},
           {"max_positions", max_positions > 0 ? max_positions : preset.max_positions},
           {"dropout", dropout >= 0 ? dropout : d.dropout}, {"attention", attention.empty() ? "eager" : attention}};
    } else if (e.task == TaskKind::segmentation) {
      const ModelConfig d = default_model_config(model);
      j = {{"base_width", base_width > 0 ? base_width : unet_base_width(model, d)},
           {"depth", depth > 0 ? depth : unet_depth(model, d)}};
    } else if (e.family == "vgg") {
      j = {{"dropout", dropout >= 0 ? dropout : default_model_config(model).classifier_dropout}};
    } else if (e.has_use("norm")) {
      j = {{"norm", norm.empty() ? "bn" : norm}};
      if (fuse_relu == "on") j["fuse_relu"] = true;   // absent: off (results before the flag)
    }
  } catch (const Error&) {   // unknown model: nothing to resolve (building it reports that)
  }
  return j;
}

void check_seq_fits(const std::string& model, const ArchOverrides& arch, int64_t len, const char* flag) {
  if (model_input_kind(model) != InputKind::tokens) return;
  const int64_t table = arch.max_positions > 0 ? arch.max_positions
                                               : bert_shape(model, default_model_config(model)).max_positions;
  OOMLAB_CHECK(len <= table, flag, " ", len, " exceeds max_positions ", table, " of ", model,
               " (its position-embedding table); use a shorter sequence, or pass --max-positions ", len,
               " to enlarge the table (the parameter count then differs from Hugging Face's)");
}

}  // namespace oomlab
