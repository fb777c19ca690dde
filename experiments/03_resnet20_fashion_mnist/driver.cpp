// driver.cpp — experiment 03_resnet20_fashion_mnist: summary and verdict (registered
// with the runner; the points are `train` runs on the CPU, 1 epoch and 1 seed quick, 10
// epochs and 3 seeds full).
// Summary: the per-epoch history, the final test accuracy, throughput and step times, the
// resolved training config and the run's memory.
#include <cstdio>

#include "experiments/runner/driver_util.h"
#include "experiments/runner/registry.h"
#include "experiments/runner/verdict_rule.h"

namespace oomlab {
namespace {
using json = nlohmann::json;

json summarize_03(const json& spec, json& points) {
  const std::vector<const json*> runs = ok_points(points, "train");
  OOMLAB_CHECK(!runs.empty(), "experiment 03: no train point finished");
  const json& r = *runs[0];
  const json& hist = r["metrics"]["history"];
  OOMLAB_CHECK(!hist["epochs"].empty(), "experiment 03: the train point has no epoch results");
  std::vector<double> accs;
  for (const json* p : runs) {
    const json& e = (*p)["metrics"]["history"]["epochs"];
    OOMLAB_CHECK(!e.empty(), "experiment 03: point '", (*p)["name"].get<std::string>(), "' has no epoch results");
    accs.push_back(e.back()["test_accuracy"].get<double>());
  }
  return {{"epochs", hist["epochs"]}, {"epochs_run", r["config"]["epochs"]}, {"profile", spec.value("profile", "")},
          {"final_test_accuracy", hist["epochs"].back()["test_accuracy"]}, {"final_test_accuracies", accs},
          {"accuracy_interval", interval_json(seed_mean(accs))},
          {"step_time_s", r["metrics"]["step_time_s"]}, {"images_per_s", r["metrics"]["images_per_s"]},
          {"train_config", r["config"]}, {"memory", r["memory"]}};
}

// The claim "reaches the target accuracy within target_epochs": the seeds' mean interval
// above the target (verdict_rule.h); runs shorter than target_epochs (quick) are not judged.
json verdict_03(const json& spec, const json& summary) {
  const double target = spec["source"]["target_test_accuracy"];
  const int64_t target_epochs = spec["source"]["target_epochs"];
  const int64_t epochs = summary["epochs_run"];
  const Interval acc = summary.contains("accuracy_interval")
                           ? interval_from_json(summary["accuracy_interval"])
                           : seed_mean({summary["final_test_accuracy"].get<double>()});
  const Judged j = epochs > target_epochs ? Judged::fails
                   : epochs < target_epochs ? Judged::too_few : judge_threshold(acc, target, true);
  std::string reason = str_cat("ResNet-20 reached ", interval_text(acc, "seeds", 100, "%"), " test accuracy after ",
                               epochs, " epoch(s) (", summary["profile"].get<std::string>(), " profile) at ",
                               std::lround(summary["images_per_s"].get<double>()), " images/s on this CPU; target ",
                               std::lround(100 * target), "% within ", target_epochs, " epochs: ", judged_name(j), ".");
  if (epochs < target_epochs) reason += " Too few epochs to judge the claim: run the full profile.";
  return {{"status", verdict_status({j})}, {"reason", reason}};
}

}  // namespace

OOMLAB_REGISTER_EXPERIMENT({"03_resnet20_fashion_mnist", summarize_03, verdict_03, {},
                            {{"source.target_test_accuracy", "positive"}, {"source.target_epochs", "integer"}}});

}  // namespace oomlab
