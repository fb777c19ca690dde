// train_checks.h — `oomlab train`'s checks before any work (check_train_config in
// train_command.h is defined in train_checks.cpp) and the --lr-groups parser both the checks
// and the trainer's configuration use. Internal to experiments/cli.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace oomlab {

// --lr-groups "NAME_PREFIX=FACTOR,...": each a parameter-name prefix (e.g. "fc." or
// "layer4.") and its lr factor (> 0, finite); prefixes unique. Empty text: no groups.
std::vector<std::pair<std::string, double>> parse_lr_groups(const std::string& text);

}  // namespace oomlab
