// model_arch.h — architecture overrides a run may give a zoo model: BERT's hidden size,
// layers, heads, position-table size and dropout (bert-*; VGG: the classifier dropout), UNet's base width and depth
// (unet*), the ResNets' normalisation layer (resnet*: --norm bn|gn|none). Shared by `train`, `summary` and `estimate` (TrainConfig / ModelSpec).
// Contracts:
//  * 0 (dropout: < 0) means "the preset's value"; apply() copies only the given values.
//  * check_fits(model) throws ValueError naming the flag and the model when a BERT flag
//    is given to a non-BERT model or a UNet flag to a non-UNet model.
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

namespace oomlab {

struct ModelConfig;

struct ArchOverrides {
  int64_t hidden = 0, layers = 0, heads = 0, max_positions = 0;   // bert-*
  double dropout = -1;                                            // bert-* (preset 0.1), vgg* classifier (0.5); < 0: preset
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

// The architecture flags (--hidden ... --norm; ranges and choices are the flag table's)
// for `model`: ValueError on a flag the model has no use for.
class CliArgs;
ArchOverrides arch_flags(const CliArgs& a, const std::string& model);

}  // namespace oomlab
