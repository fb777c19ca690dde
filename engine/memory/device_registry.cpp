// device_registry.cpp — raw memory sources (host aligned malloc, meta fake addresses),
// the per-device-type factory registry (cuda registers at start-up), and the
// process-wide map Device -> CachingAllocator behind allocator_for().
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

#include <unistd.h>

#include "engine/core/lazy_backend.h"
#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"
#include "engine/memory/kernel_choices.h"

namespace oomlab {
namespace {
size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }
}  // namespace

// ---- raw memory ----------------------------------------------------------------------

namespace {

struct HostRawMemory final : RawMemory {
  void* alloc(size_t nbytes) override {
    if (nbytes == 0 || nbytes > (SIZE_MAX >> 1)) return nullptr;
    return std::aligned_alloc(64, round_up(nbytes, 64));
  }
  void free(void* ptr, size_t) override { std::free(ptr); }
  const char* name() const override { return "host"; }
  size_t free_bytes() const override {
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return (pages < 0 || page < 0) ? SIZE_MAX : size_t(pages) * size_t(page);
  }
};

struct MetaRawMemory final : RawMemory {
  std::atomic<uint64_t> next{0x7f0000000000ull};  // fake, never reused, never dereferenced
  void* alloc(size_t nbytes) override {
    if (nbytes == 0 || nbytes > (SIZE_MAX >> 2)) return nullptr;
    return reinterpret_cast<void*>(next.fetch_add(round_up(nbytes, kMinBlockSize)));
  }
  void free(void*, size_t) override {}
  const char* name() const override { return "meta"; }
};

struct Registry {
  std::mutex mu;
  RawMemoryFactory factories[kNumDeviceTypes] = {};
  std::map<std::pair<int, int>, std::unique_ptr<CachingAllocator>> allocators;
};
// Intentionally leaked: tensors in other static objects may free into it during exit.
Registry& registry() { static Registry* r = new Registry; return *r; }

}  // namespace

std::unique_ptr<RawMemory> make_host_raw_memory() { return std::make_unique<HostRawMemory>(); }
std::unique_ptr<RawMemory> make_meta_raw_memory() { return std::make_unique<MetaRawMemory>(); }

// A nullptr factory unregisters (cpu/meta then fall back to host/meta raw memory).
void register_raw_memory(DeviceType type, RawMemoryFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories[int(type)] = factory;
}

namespace {
bool has_factory(DeviceType type) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.factories[int(type)] != nullptr;
}
}  // namespace

CachingAllocator& allocator_for(Device device) {
  // A lazy backend (lazy_backend.h) registers its memory as it loads: load it before the lock.
  if (!device.is_cpu() && !device.is_meta() && !has_factory(device.type)) ensure_backend_loaded(device.type);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto key = std::make_pair(int(device.type), device.index);
  if (auto it = r.allocators.find(key); it != r.allocators.end()) return *it->second;
  std::unique_ptr<RawMemory> raw;
  if (RawMemoryFactory f = r.factories[int(device.type)]; f != nullptr) raw = f(device.index);
  else if (device.type == DeviceType::cpu) raw = make_host_raw_memory();
  else if (device.type == DeviceType::meta) raw = make_meta_raw_memory();
  else throw DeviceError("oomlab was built without CUDA support; use a cpu or meta device");
  OOMLAB_CHECK_T(DeviceError, raw != nullptr, "no raw memory for device ", device.str());
  auto alloc = std::make_unique<CachingAllocator>(device, std::move(raw));
  return *r.allocators.emplace(key, std::move(alloc)).first->second;
}

// Callers must have freed every block: destroyed allocators return all segments.
void reset_allocators() {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.allocators.clear();
  }
  reset_kernel_choices();   // a run's results list its own kernel choices
}

}  // namespace oomlab
