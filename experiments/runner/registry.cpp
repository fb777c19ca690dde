// registry.cpp — the experiment driver table and the generic driver (registry.h).
#include "experiments/runner/registry.h"

#include <map>
#include <mutex>

#include "engine/core/error.h"

namespace oomlab {
namespace {
struct Drivers {
  std::mutex mu;
  std::map<std::string, ExperimentDriver> by_name;
};
Drivers& drivers() { static Drivers* d = new Drivers; return *d; }

nlohmann::json count_outcomes(const nlohmann::json&, nlohmann::json& points) {
  nlohmann::json outcomes = nlohmann::json::object();
  for (const auto& p : points) {
    const std::string status = p["outcome"]["status"];
    outcomes[status] = outcomes.value(status, 0) + 1;
  }
  return {{"points", points.size()}, {"outcomes", outcomes}};
}

nlohmann::json no_judgement(const nlohmann::json& spec, const nlohmann::json& summary) {
  std::string counts;
  for (const auto& [status, n] : summary["outcomes"].items())
    counts += str_cat(counts.empty() ? "" : ", ", status, ": ", n.get<int64_t>());
  return {{"status", "inconclusive"},
          {"reason", str_cat("There is no driver for ", spec.value("name", std::string("this experiment")),
                             " (no driver.cpp in its folder), so no driver judges its claim: ",
                             summary["points"].get<int64_t>(), " point(s) ran (", counts,
                             "); the points table holds what they measured.")}};
}

const ExperimentDriver& generic_driver() {
  static const ExperimentDriver d{"", count_outcomes, no_judgement, {}, {}};
  return d;
}
}  // namespace

bool register_experiment(ExperimentDriver driver) {
  Drivers& d = drivers();
  std::lock_guard<std::mutex> lock(d.mu);
  const std::string name = driver.name;
  d.by_name[name] = std::move(driver);
  return true;
}

const ExperimentDriver& experiment_driver(const std::string& name) {
  Drivers& d = drivers();
  std::lock_guard<std::mutex> lock(d.mu);
  auto it = d.by_name.find(name);
  return it != d.by_name.end() ? it->second : generic_driver();
}

}  // namespace oomlab
