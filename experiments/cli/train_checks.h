// train_checks.h — `oomlab train`'s checks before any work (check_train_config in
// train_command.h is defined in train_checks.cpp), the --lr-groups parser both the checks
// and the trainer's configuration use, and --cuda-graphs' model rules (estimate's too).
// Internal to experiments/cli.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace oomlab {

// --lr-groups "NAME_PREFIX=FACTOR,...": each a parameter-name prefix (e.g. "fc." or
// "layer4.") and its lr factor (> 0, finite); prefixes unique. Empty text: no groups.
std::vector<std::pair<std::string, double>> parse_lr_groups(const std::string& text);

// --cuda-graphs' rules on the model and the loss scaling, for train and estimate alike: no
// loss scaling (the scaler reads the gradients on the host), no imported token model (its
// integer constants come from the host every step). ValueError in the flags' words.
void check_cuda_graphs_model(const std::string& model, const std::string& loss_scale);

// --channels-last: image models only (a token model has no 4-D tensor to lay out), for train
// and estimate alike. ValueError naming the model.
void check_channels_last_model(const std::string& model);

}  // namespace oomlab
