// model_table.cpp — the zoo's rows and the row of an imported graph (model_table.h).
#include "models/model_table.h"

#include <algorithm>

#include "engine/core/error.h"
#include "models/graph_model.h"

namespace oomlab {
namespace {
const std::vector<std::string> kImageTechniques = {"channels-last", "cuda-graphs", "tta-flip"};

ModelEntry row(std::string name, std::string family, ModelBuildFn build, int64_t channels, int64_t size,
               int64_t classes, std::vector<std::string> uses) {
  ModelEntry e;
  e.name = std::move(name);
  e.family = std::move(family);
  e.build = build;
  e.defaults.in_channels = channels;
  e.defaults.height = e.defaults.width = size;
  e.defaults.num_classes = classes;
  e.uses = std::move(uses);
  e.techniques = kImageTechniques;
  return e;
}

ModelEntry vgg(std::string name) {
  ModelEntry e = row(std::move(name), "vgg", build_vgg, 3, 224, 10, {"dropout", "fuse-relu", "classes"});
  e.min_image_size = 32;
  e.min_size_why = "its 5 max-pools halve the size 5 times";
  return e;
}
ModelEntry resnet(std::string name, bool cifar) {
  return cifar ? row(std::move(name), "cifar-resnet", build_cifar_resnet, 1, 28, 10, {"norm", "fuse-relu", "classes"})
               : row(std::move(name), "resnet", build_resnet, 3, 224, 10, {"norm", "fuse-relu", "classes"});
}
ModelEntry bert(std::string name) {
  ModelEntry e = row(std::move(name), "bert", build_bert, 3, 224, 2,   // image fields unused
                     {"bert-shape", "dropout", "attention", "classes", "padding"});
  e.input = InputKind::tokens;
  e.defaults.seq_len = 128;
  e.techniques = {"cuda-graphs"};
  return e;
}
ModelEntry unet(std::string name, int64_t size) {
  ModelEntry e = row(std::move(name), "unet", build_unet, 3, size, 2, {"unet-shape", "classes"});
  e.task = TaskKind::segmentation;
  e.min_image_size = int64_t(1) << 4;   // the preset depth; the builder checks divisibility
  e.techniques = {"channels-last", "cuda-graphs"};
  return e;
}

std::vector<ModelEntry> make_zoo() {
  return {vgg("vgg11"), vgg("vgg11_bn"), vgg("vgg16"), vgg("vgg16_bn"),
          resnet("resnet18", false), resnet("resnet34", false), resnet("resnet50", false),
          resnet("resnet20", true), resnet("resnet56", true),
          row("mlp", "mlp", build_mlp, 1, 28, 10, {"classes"}),
          bert("bert-tiny"), bert("bert-mini"), bert("bert-small"), bert("bert-base"),
          unet("unet", 256), unet("unet-small", 64),
          row("tiny-ff", "tiny-ff", build_tiny_ff, 1, 28, 10, {"classes"})};
}

// A graph's sizes are the export's: the input must match them (the batch may differ).
nn::ModulePtr build_graph(const std::string& name, const ModelConfig& cfg) {
  const ModelConfig g = graph_model_config(name);
  if (model_entry(name).input == InputKind::tokens)
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

// The row of an imported graph, from its file: its input kind, its export's sizes, and the
// flags it has a use for (attention: a scaled_dot_product_attention node; padding: an
// attention-mask input). Never "classes": its classes are those of its exported output.
ModelEntry graph_entry(const std::string& name) {
  const ModelGraph& g = graph_of_model(name);   // a missing or malformed file is named here
  ModelEntry e;
  e.name = name;
  e.family = "graph";
  e.build = build_graph;
  e.input = g.inputs.at(0).dtype == "int64" ? InputKind::tokens : InputKind::image;
  e.defaults = graph_model_config(name);
  e.min_image_size = e.defaults.height;   // the export's size
  for (const GraphNode& n : g.nodes)
    if (n.op == "aten.scaled_dot_product_attention.default") {
      e.uses.push_back("attention");
      break;
    }
  if (graph_has_mask_input(g)) e.uses.push_back("padding");
  e.techniques = e.input == InputKind::image ? kImageTechniques : std::vector<std::string>{};
  return e;
}
}  // namespace

bool ModelEntry::has_use(const std::string& use) const {
  return std::find(uses.begin(), uses.end(), use) != uses.end();
}

bool ModelEntry::has_technique(const std::string& technique) const {
  return std::find(techniques.begin(), techniques.end(), technique) != techniques.end();
}

const std::vector<ModelEntry>& zoo_table() {
  static const std::vector<ModelEntry> zoo = make_zoo();
  return zoo;
}

ModelEntry model_entry(const std::string& name) {
  if (is_graph_model(name)) return graph_entry(name);
  for (const ModelEntry& e : zoo_table())
    if (e.name == name) return e;
  std::string valid;
  for (const ModelEntry& e : zoo_table()) valid += (valid.empty() ? "" : ", ") + e.name;
  throw ValueError(str_cat("unknown model '", name, "'; valid models: ", valid));
}

}  // namespace oomlab
