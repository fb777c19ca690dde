// recipes.cpp — the per-family default recipes (recipes.h).
#include "experiments/train/recipes.h"

#include "engine/core/error.h"
#include "models/model_zoo.h"

namespace oomlab {
namespace {
Recipe optimizer_defaults(const std::string& family, const std::string& optimizer) {
  if (optimizer == "sgd") return {family, "sgd", 0.1, 0.9, 5e-4, "cosine"};
  if (optimizer == "adam") return {family, "adam", 1e-3, 0.0, 0.0, "cosine"};
  if (optimizer == "adamw") return {family, "adamw", 1e-3, 0.0, 0.01, "cosine"};
  throw ValueError(str_cat("unknown optimizer '", optimizer, "' (expected sgd, adam or adamw)"));
}
}  // namespace

nlohmann::json Recipe::to_json() const {
  return {{"family", family}, {"optimizer", optimizer}, {"lr", lr}, {"momentum", momentum},
          {"weight_decay", weight_decay}, {"schedule", schedule}};
}

Recipe default_recipe(const std::string& model) {
  // model_input_kind / model_task_kind reject unknown names (listing the valid ones).
  if (model_input_kind(model) == InputKind::tokens) return {"bert", "adamw", 5e-4, 0.0, 0.01, "warmup-cosine"};
  if (model_task_kind(model) == TaskKind::segmentation) return {"unet", "adam", 1e-3, 0.0, 0.0, "cosine"};
  return {"cnn", "sgd", 0.1, 0.9, 5e-4, "cosine"};
}

Recipe resolve_recipe(const std::string& model, const RecipeFlags& f, std::vector<std::string>* given) {
  Recipe r = default_recipe(model);
  if (f.optimizer && *f.optimizer != r.optimizer) {
    const std::string schedule = r.schedule;
    r = optimizer_defaults(r.family, *f.optimizer);
    r.schedule = schedule;
  }
  auto take = [&](const auto& flag, auto& field, const char* name) {
    if (!flag) return;
    field = *flag;
    if (given) given->push_back(name);
  };
  std::string opt = r.optimizer;
  take(f.optimizer, opt, "optimizer");
  take(f.lr, r.lr, "lr");
  take(f.momentum, r.momentum, "momentum");
  take(f.weight_decay, r.weight_decay, "weight_decay");
  take(f.schedule, r.schedule, "schedule");
  return r;
}

}  // namespace oomlab
