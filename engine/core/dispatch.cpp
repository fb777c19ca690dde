// dispatch.cpp — the backend registry behind ensure_kernels_registered() (dispatch.h).
// Backends announce themselves from static initialisers, before main(); the list is a
// function-local static so announcement order does not depend on initialisation order.
// A lazy backend's library (lazy_backend.h) announces itself while dlopen runs its static
// initialisers, after registration may already have run: its registrar then runs at once.
#include "engine/core/dispatch.h"

#include <dlfcn.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/core/lazy_backend.h"
#include "oomlab_git.h"   // OOMLAB_GIT_SHA, OOMLAB_GIT_DIRTY (scripts/git_version.cmake)

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
  bool run_now = false;
  {
    std::lock_guard<std::mutex> lock(l.mu);
    l.backends.push_back({name, register_fn});
    run_now = l.ran;
  }
  if (run_now) register_fn();
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
  for (int t = 0; t < kNumDeviceTypes; ++t)
    if (!lazy_backend_path(DeviceType(t)).empty() && std::strcmp(device_type_name(DeviceType(t)), name) == 0)
      return true;
  BackendList& l = backend_list();
  std::lock_guard<std::mutex> lock(l.mu);
  for (const Announced& b : l.backends)
    if (std::strcmp(b.name, name) == 0) return true;
  return false;
}

// ---- lazy backends --------------------------------------------------------------------------
namespace {
struct LazyBackend {
  std::string path;
  bool loading = false;   // dlopen is running on the thread that holds the lock
  bool loaded = false;
  std::string refused;    // accept_lazy_backend_build's refusal: the load's error from then on
};
thread_local std::string t_refusal;   // accept_lazy_backend_build's refusal of the library loading here
struct LazyBackends {
  std::recursive_mutex mu;   // a library's registrar may ask for its own backend while it loads
  LazyBackend of[kNumDeviceTypes];
};
LazyBackends& lazy_backends() { static auto* l = new LazyBackends; return *l; }   // leaked: used at exit
}  // namespace

void set_lazy_backend(DeviceType type, const std::string& path) {
  LazyBackends& l = lazy_backends();
  std::lock_guard<std::recursive_mutex> lock(l.mu);
  OOMLAB_CHECK(!l.of[int(type)].loaded, "the ", device_type_name(type), " backend is already loaded");
  l.of[int(type)].path = path;
}

bool ensure_backend_loaded(DeviceType type) {
  LazyBackends& l = lazy_backends();
  std::lock_guard<std::recursive_mutex> lock(l.mu);
  LazyBackend& b = l.of[int(type)];
  if (b.path.empty()) return false;
  if (!b.refused.empty()) throw DeviceError(b.refused);
  if (b.loaded || b.loading) return true;
  ensure_kernels_registered();   // so that the library's announcement registers at once
  b.loading = true;
  t_refusal.clear();
  void* handle = dlopen(b.path.c_str(), RTLD_NOW | RTLD_GLOBAL);   // never closed: its kernels stay in tables
  b.loading = false;
  if (handle == nullptr) {
    const char* why = dlerror();
    throw DeviceError(str_cat("the ", device_type_name(type), " backend library ", b.path,
                              " could not be loaded: ", why ? why : "unknown reason"));
  }
  if (!t_refusal.empty()) {
    b.refused = str_cat("the ", device_type_name(type), " backend library ", b.path, " was refused: ", t_refusal);
    throw DeviceError(b.refused);
  }
  b.loaded = true;
  return true;
}

const char* lazy_backend_build_id() { return OOMLAB_BUILD_ID; }

bool accept_lazy_backend_build(const char* library, const char* library_build) {
  if (std::strcmp(library_build, lazy_backend_build_id()) == 0) return true;
  t_refusal = str_cat(library, " is of build ", library_build, ", this oomlab of build ", lazy_backend_build_id(),
                      ": put the library of the same build beside the binary (rebuild both)");
  return false;
}

std::string lazy_backend_path(DeviceType type) {
  LazyBackends& l = lazy_backends();
  std::lock_guard<std::recursive_mutex> lock(l.mu);
  return l.of[int(type)].path;
}

bool lazy_backend_loaded(DeviceType type) {
  LazyBackends& l = lazy_backends();
  std::lock_guard<std::recursive_mutex> lock(l.mu);
  return l.of[int(type)].loaded;
}

namespace {
thread_local DeviceType emulated_by_meta = DeviceType::cpu;
}
DeviceType meta_emulated_device_type() { return emulated_by_meta; }
MetaEmulationGuard::MetaEmulationGuard(DeviceType emulated) : previous_(emulated_by_meta) {
  OOMLAB_CHECK(emulated != DeviceType::meta, "meta cannot emulate itself");
  ensure_backend_loaded(emulated);   // lazy_backend.h: the tables meta's launches will check
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
