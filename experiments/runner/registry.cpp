// registry.cpp — the experiment driver table (registry.h).
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
  if (it != d.by_name.end()) return it->second;
  std::string known;
  for (const auto& [n, drv] : d.by_name) known += (known.empty() ? "" : ", ") + n;
  throw ValueError(str_cat("oomlab run: no driver registered for experiment '", name, "' (known: ", known, ")"));
}

std::vector<std::string> registered_experiments() {
  Drivers& d = drivers();
  std::lock_guard<std::mutex> lock(d.mu);
  std::vector<std::string> out;
  for (const auto& [n, drv] : d.by_name) out.push_back(n);
  return out;
}

}  // namespace oomlab
