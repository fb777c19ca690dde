// model_table.h — the model table: one row per model of the zoo (nccl-tests' `struct
// testColl` style), and one row made from an imported graph's file (--model graph:FILE).
// A question about a model ("is it a token model?", "does --dropout apply?") is a field of
// its row, asked here once; model_zoo.h's functions and the model-use checks read it.
// Contracts:
//  * model_entry(name) of an unknown name is a ValueError listing the zoo's names; of a
//    graph:FILE, the file is read (graph_model.h: a missing or malformed one is named).
//  * uses: the model uses (experiments/plan/model_arch.h) that apply to the model, i.e.
//    the model-specific flags it accepts: bert-shape, unet-shape, dropout, norm, fuse-relu,
//    attention, classes, padding.
//  * techniques: the techniques whose rules depend on the model: channels-last (a 4-D
//    image input), cuda-graphs (no imported token model: its integer constants come from
//    the host every step), tta-flip (image classification).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "models/model_zoo.h"

namespace oomlab {

using ModelBuildFn = nn::ModulePtr (*)(const std::string& name, const ModelConfig& cfg);

struct ModelEntry {
  std::string name;
  std::string family;                 // vgg, resnet, cifar-resnet, mlp, bert, unet, tiny-ff, graph
  ModelBuildFn build = nullptr;
  InputKind input = InputKind::image;
  TaskKind task = TaskKind::classification;
  ModelConfig defaults;               // input channels and size (images) or seq_len, classes
  int64_t min_image_size = 1;         // smallest height / width it accepts
  std::string min_size_why;           // why, for the error ("" = no reason to add)
  std::vector<std::string> uses;
  std::vector<std::string> techniques;
  bool has_use(const std::string& use) const;
  bool has_technique(const std::string& technique) const;
  bool is_graph() const { return family == "graph"; }
};

ModelEntry model_entry(const std::string& name);
// The zoo's rows, in `oomlab models` order.
const std::vector<ModelEntry>& zoo_table();

}  // namespace oomlab
