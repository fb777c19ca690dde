// driver.cpp — experiment 03_resnet20_fashion_mnist: summary and verdict (registered
// with the runner; the point is one `train` run on the CPU, 1 epoch quick, 10 full).
// Summary: the per-epoch history, the final test accuracy, throughput and step times, the
// resolved training config and the run's memory.
#include <cstdio>

#include "experiments/runner/driver_util.h"
#include "experiments/runner/registry.h"

namespace oomlab {
namespace {
using json = nlohmann::json;

json summarize_03(const json& spec, json& points) {
  const std::vector<const json*> runs = ok_points(points, "train");
  OOMLAB_CHECK(runs.size() == 1, "experiment 03: expected one train point, got ", runs.size());
  const json& r = *runs[0];
  const json& hist = r["metrics"]["history"];
  OOMLAB_CHECK(!hist["epochs"].empty(), "experiment 03: the train point has no epoch results");
  return {{"epochs", hist["epochs"]}, {"epochs_run", r["config"]["epochs"]}, {"profile", spec.value("profile", "")},
          {"final_test_accuracy", hist["epochs"].back()["test_accuracy"]},
          {"step_time_s", r["metrics"]["step_time_s"]}, {"images_per_s", r["metrics"]["images_per_s"]},
          {"train_config", r["config"]}, {"memory", r["memory"]}};
}

json verdict_03(const json& spec, const json& summary) {
  const double target = spec["source"]["target_test_accuracy"];
  const int64_t target_epochs = spec["source"]["target_epochs"];
  const double acc = summary["final_test_accuracy"];
  const int64_t epochs = summary["epochs_run"];
  char buf[400];
  std::snprintf(buf, sizeof buf, "ResNet-20 reached %.2f%% test accuracy after %lld epoch(s) (%s profile) at %.0f images/s on "
                "this CPU; target %.0f%% within %lld epochs.", 100 * acc, (long long)epochs,
                summary["profile"].get<std::string>().c_str(), summary["images_per_s"].get<double>(), 100 * target,
                (long long)target_epochs);
  std::string status = acc >= target && epochs <= target_epochs ? "confirmed"
                       : (epochs < target_epochs ? "depends" : "refuted");
  std::string reason = buf;
  if (status == "depends") reason += " Too few epochs to judge the claim: run the full profile.";
  return {{"status", status}, {"reason", reason}};
}

}  // namespace

OOMLAB_REGISTER_EXPERIMENT({"03_resnet20_fashion_mnist", summarize_03, verdict_03, {},
                            {{"source.target_test_accuracy", "positive"}, {"source.target_epochs", "integer"}}});

}  // namespace oomlab
