// recipes.h — default training recipes per model family, so that `oomlab train --model M
// --dataset D` learns without recipe flags:
//   cnn  (vgg*, resnet*, mlp, tiny-ff): SGD lr 0.1, momentum 0.9, weight decay 5e-4, cosine
//        (torchvision's reference recipe, shortened);
//   bert (bert-*): AdamW lr 5e-4, weight decay 0.01, warm-up over the first 10% of the
//        steps then cosine (BERT fine-tuning practice);
//   unet (unet*): Adam lr 1e-3, no weight decay, cosine.
// A flag overrides one field. Naming another optimizer than the family's switches to that
// optimizer's own defaults (sgd: lr 0.1, momentum 0.9, wd 5e-4; adam: lr 1e-3, wd 0;
// adamw: lr 1e-3, wd 0.01, as torch.optim.AdamW) for the fields not given.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace oomlab {

struct Recipe {
  std::string family;          // cnn | bert | unet
  std::string optimizer;       // sgd | adam | adamw
  double lr = 0, momentum = 0, weight_decay = 0;
  std::string schedule;        // lr_schedule.h spec; "cosine" / "warmup-cosine" span the run
  nlohmann::json to_json() const;
};

// The family default of a zoo model (ValueError for an unknown model).
Recipe default_recipe(const std::string& model);

// The family default with the given fields replaced; `given` lists the flags that were
// (e.g. "lr"), for the results.
struct RecipeFlags {
  std::optional<std::string> optimizer, schedule;
  std::optional<double> lr, momentum, weight_decay;
};
Recipe resolve_recipe(const std::string& model, const RecipeFlags& flags, std::vector<std::string>* given = nullptr);

}  // namespace oomlab
