// model_arch.h — architecture overrides a run may give a zoo model: BERT's hidden size,
// layers, heads, position-table size and dropout (bert-*; VGG: the classifier dropout), UNet's base width and depth
// (unet*), the ResNets' normalisation layer (resnet*: --norm bn|gn|none). Shared by `train`, `summary` and `estimate`
// (RunSpec). The model-use table: which models a model-specific flag applies to (the flag table's `models` column names
// a use). A flag given to a model without its use, whatever its value
// (--fuse-relu off, --attention eager included), is a ValueError naming the flag, the models
// it applies to and the model: never accepted and ignored.
// Contracts:
//  * 0 (dropout: < 0) means "the preset's value"; apply() copies only the given values.
//  * check_fits(model) throws that ValueError for each given override the model has no use
//    for (the same table: what `train`, `summary` and `estimate` check from their flags).
//  * check_seq_fits: a sequence length above the model's max_positions is a ValueError
//    naming both numbers and the --max-positions flag (the table is never enlarged
//    silently: that would change the parameter count).
//  * to_json(model): the resolved values of the model's family (for results `config`);
//    an empty object for other models.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace oomlab {

struct ModelConfig;

struct ModelUse {
  std::string name;     // the flag table's `models` value
  std::string owners;   // "BERT models (bert-*) and ...": the models that have it, for errors
};                      // which models have it: their rows' `uses` (models/model_table.h)
const std::vector<ModelUse>& model_uses();
// ValueError "--FLAG applies to OWNERS; --model M is not one" unless `model` has `use`; an
// unknown model is named as such first.
void check_model_use(const std::string& flag, const std::string& use, const std::string& model);
// The architecture flags (without "--") and the model use each needs; the flag table's
// `models` column says the same (tests/test_cli_flags.cpp compares them).
const std::vector<std::pair<std::string, std::string>>& arch_flag_uses();

struct ArchOverrides {
  int64_t hidden = 0, layers = 0, heads = 0, max_positions = 0;   // bert-*
  double dropout = -1;  // bert-* (preset 0.1), vgg* classifier (0.5); < 0: preset
  int64_t base_width = 0, depth = 0;                              // unet*
  std::string norm;                                               // resnet*: bn | gn | none; "": bn
  std::string attention;                                          // bert-*: eager | fused; "": eager
  std::string fuse_relu;                                       // resnet*: on | off; "": off
  void check_fits(const std::string& model) const;
  void apply(ModelConfig& cfg) const;
  nlohmann::json to_json(const std::string& model) const;
};

// `len` (given with `flag`, e.g. "--seq-len") must be <= the position table of `model`
// with these overrides; no-op for non-token models.
void check_seq_fits(const std::string& model, const ArchOverrides& arch, int64_t len, const char* flag);

}  // namespace oomlab
