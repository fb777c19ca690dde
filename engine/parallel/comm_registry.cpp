// comm_registry.cpp — name -> factory of the process-level backends (comm_registry.h).
#include "engine/parallel/comm_registry.h"

#include <map>
#include <mutex>

#include "engine/core/dispatch.h"
#include "engine/core/lazy_backend.h"

namespace oomlab {
namespace {
struct Registry {
  std::mutex mu;
  std::map<std::string, CommFactory> factories;
};
Registry& registry() { static Registry* r = new Registry; return *r; }

CommFactory registered_factory(const std::string& name) {
  ensure_kernels_registered();   // the CUDA backend registers nccl with its kernels
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.factories.find(name);
  return it == r.factories.end() ? CommFactory{} : it->second;
}

// The factory of `name`, loading the lazy backends (lazy_backend.h: nccl lives in the CUDA
// library) when no linked library registered it.
CommFactory factory_of(const std::string& name) {
  CommFactory f = registered_factory(name);
  if (f) return f;
  bool loaded = false;
  for (int t = 0; t < kNumDeviceTypes; ++t)
    if (!lazy_backend_loaded(DeviceType(t))) loaded |= ensure_backend_loaded(DeviceType(t));
  return loaded ? registered_factory(name) : CommFactory{};
}
}  // namespace

bool comm_backend_available(const std::string& name) { return bool(factory_of(name)); }

void require_comm_backend(const std::string& name, const std::string& what) {
  if (comm_backend_available(name)) return;
  std::string have = "local";
  for (const std::string& n : comm_backends()) have += ", " + n;
  throw ValueError(str_cat(what, " '", name, "' is not in this build (it has: ", have, ")"));
}

void register_comm_backend(const std::string& name, CommFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  r.factories[name] = std::move(factory);
}

std::vector<std::string> comm_backends() {
  ensure_kernels_registered();
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  std::vector<std::string> names;
  for (const auto& [name, f] : r.factories) names.push_back(name);
  return names;
}

std::unique_ptr<Communicator> make_communicator(const std::string& name, const RankInfo& rank, Device device) {
  require_comm_backend(name);
  return factory_of(name)(rank, device);
}

}  // namespace oomlab
