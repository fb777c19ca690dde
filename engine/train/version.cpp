// version.cpp — version_line() (version.h).
#include "engine/train/version.h"

#include "engine/core/device.h"
#include "engine/core/dispatch.h"
#include "engine/core/error.h"
#include "engine/core/lazy_backend.h"
#include "oomlab_git.h"   // OOMLAB_GIT_SHA, OOMLAB_GIT_DIRTY: written at build time (scripts/git_version.cmake)

namespace oomlab {

std::string version_line() {
  std::string backends;
  for (DeviceType t : {DeviceType::cpu, DeviceType::cuda}) {
    if (!backend_linked(device_type_name(t))) continue;
    const std::string lazy = lazy_backend_path(t);
    backends += str_cat(backends.empty() ? "" : ", ", device_type_name(t),
                        lazy.empty() ? "" : str_cat(" (", lazy, ", loaded at its first use)"));
  }
  return str_cat("oomlab ", kOomlabVersion, " (commit ", OOMLAB_GIT_SHA, OOMLAB_GIT_DIRTY != 0 ? ", dirty" : "", "; ",
                 OOMLAB_BUILD_TYPE, ", ", OOMLAB_COMPILER, ")\nbackends: ", backends, "\n");
}

}  // namespace oomlab
