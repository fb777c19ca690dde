// pinned_host.cpp — pinned host blocks through the accelerator backend's hooks (pinned_host.h).
#include "engine/memory/pinned_host.h"

#include "engine/core/backend.h"
#include "engine/core/error.h"

namespace oomlab {
namespace {
BackendHooks pinned_hooks(const Device& device, const char* what) {
  const BackendHooks h = backend_hooks(device.type);
  OOMLAB_CHECK_T(ValueError, h.pinned_alloc && h.pinned_free && h.copy_from_pinned, what, ": device ",
                 device.str(), " has no pinned host memory");
  return h;
}
}  // namespace

bool has_pinned_host_memory(const Device& device) {
  if (device.is_cpu() || device.is_meta()) return false;
  const BackendHooks h = backend_hooks(device.type);
  return h.pinned_alloc && h.pinned_free && h.copy_from_pinned;
}

std::shared_ptr<void> pinned_host_alloc(const Device& device, size_t bytes) {
  const BackendHooks h = pinned_hooks(device, "pinned_host_alloc");
  void* p = h.pinned_alloc(bytes);
  return std::shared_ptr<void>(p, h.pinned_free);
}

void copy_from_pinned(const Device& device, void* device_dst, const void* pinned_src, size_t bytes) {
  if (bytes == 0) return;
  pinned_hooks(device, "copy_from_pinned").copy_from_pinned(device_dst, pinned_src, bytes, device.index);
}

}  // namespace oomlab
