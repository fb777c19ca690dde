// dispatch.cpp — the backend registry behind ensure_kernels_registered() (dispatch.h).
// Backends announce themselves from static initialisers, before main(); the list is a
// function-local static so announcement order does not depend on initialisation order.
#include "engine/core/dispatch.h"

#include <cstring>
#include <mutex>
#include <vector>

namespace oomlab {
namespace {
struct Announced { const char* name; void (*fn)(); };
struct BackendList {
  std::mutex mu;
  std::vector<Announced> backends;
  bool ran = false;
};
BackendList& backend_list() { static BackendList* l = new BackendList; return *l; }   // leaked: used at exit
}  // namespace

bool announce_backend(const char* name, void (*register_fn)()) {
  BackendList& l = backend_list();
  std::lock_guard<std::mutex> lock(l.mu);
  l.backends.push_back({name, register_fn});
  return true;
}

void ensure_kernels_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    BackendList& l = backend_list();
    std::vector<Announced> todo;
    {
      std::lock_guard<std::mutex> lock(l.mu);
      todo = l.backends;
      l.ran = true;
    }
    for (const Announced& b : todo) b.fn();
  });
}

bool backend_linked(const char* name) {
  BackendList& l = backend_list();
  std::lock_guard<std::mutex> lock(l.mu);
  for (const Announced& b : l.backends)
    if (std::strcmp(b.name, name) == 0) return true;
  return false;
}

namespace {
thread_local DeviceType emulated_by_meta = DeviceType::cpu;
}
DeviceType meta_emulated_device_type() { return emulated_by_meta; }
MetaEmulationGuard::MetaEmulationGuard(DeviceType emulated) : previous_(emulated_by_meta) {
  OOMLAB_CHECK(emulated != DeviceType::meta, "meta cannot emulate itself");
  emulated_by_meta = emulated;
}
MetaEmulationGuard::~MetaEmulationGuard() { emulated_by_meta = previous_; }

}  // namespace oomlab
