// dispatch.cpp — the backend registry behind ensure_kernels_registered() (dispatch.h).
// Backends announce themselves from static initialisers, before main(); the list is a
// function-local static so announcement order does not depend on initialisation order.
#include "engine/core/dispatch.h"

#include <cstring>
#include <map>
#include <mutex>
#include <string>
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

// ---- the launch check (dispatch.h) ------------------------------------------------------
namespace dispatch_detail {
namespace {
thread_local AnyFn t_launching = nullptr;
struct KernelNames {
  std::mutex mu;
  std::map<AnyFn, std::string> names;
};
KernelNames& kernel_names() { static auto* k = new KernelNames; return *k; }   // leaked: used at exit
}  // namespace

AnyFn& launching_kernel() { return t_launching; }

void describe_kernel(AnyFn kernel, const char* op, DeviceType d, DType t) {
  KernelNames& k = kernel_names();
  std::lock_guard<std::mutex> lock(k.mu);
  k.names.emplace(kernel, str_cat("op '", op, "': the ", device_type_name(d), "/", dtype_name(t), " kernel"));
}

void kernel_ran_outside_launch(AnyFn kernel) {
  std::string name = "a kernel";
  {
    KernelNames& k = kernel_names();
    std::lock_guard<std::mutex> lock(k.mu);
    if (auto it = k.names.find(kernel); it != k.names.end()) name = it->second;
  }
  throw InternalError(str_cat(name, " ran outside KernelTable::launch (current device ", current_device().str(),
                              "); kernels run only through their table's launch(), which makes their device "
                              "current"));
}
}  // namespace dispatch_detail

}  // namespace oomlab
