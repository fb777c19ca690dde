// comm_registry.cpp — name -> factory of the process-level backends (comm_registry.h).
#include "engine/parallel/comm_registry.h"

#include <map>
#include <mutex>

namespace oomlab {
namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, CommFactory> factories;
};
Registry& registry() { static Registry* r = new Registry; return *r; }
}  // namespace

void register_comm_backend(const std::string& name, CommFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.factories[name] = std::move(factory);
}

std::vector<std::string> comm_backends() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories) names.push_back(name);
  return names;
}

std::unique_ptr<Communicator> make_communicator(const std::string& name, const RankInfo& rank, Device device) {
  CommFactory f;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    auto it = r.factories.find(name);
    if (it != r.factories.end()) f = it->second;
  }
  if (!f) {
    std::string have;
    for (const std::string& n : comm_backends()) have += (have.empty() ? "" : ", ") + n;
    throw ValueError(str_cat("communicator backend '", name, "' is not in this build (it has: local",
                             have.empty() ? "" : ", ", have, ")"));
  }
  return f(rank, device);
}

}  // namespace oomlab
