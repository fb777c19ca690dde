// lazy_backend_probe.h — the kernel table tests/test_lazy_backend.cpp launches and
// tests/lazy_backend_fixture.cpp (a backend library loaded at the first use) fills.
#pragma once
#include "engine/core/dispatch.h"

namespace oomlab::testing {
struct LazyProbeArgs {
  int* out;                  // the kernel writes kLazyProbeRan here
  bool* tf32_seen;           // and the matmul TF32 option its backend was last given
};
inline constexpr int kLazyProbeRan = 42;
OOMLAB_KERNEL_TABLE(lazy_probe, LazyProbeArgs, "lazy_probe")
}  // namespace oomlab::testing
