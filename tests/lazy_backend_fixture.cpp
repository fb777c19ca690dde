// lazy_backend_fixture.cpp — a backend library built as liboomlab_cuda.so is (a shared
// library that links no engine: its symbols come from the binary that loads it), with no
// CUDA in it: it announces itself for the accelerator device type and registers a probe
// kernel, runtime hooks (synchronize counts, set_options keeps the TF32 flag) and host
// memory behind that type's allocators, after the build check every such library makes.
// Built twice: as itself, and as lazy_backend_foreign, which claims another build and so is
// refused. tests/test_lazy_backend.cpp loads them.
#include <memory>

#include "engine/core/backend.h"
#include "engine/core/dispatch.h"
#include "engine/core/lazy_backend.h"
#include "engine/memory/caching_allocator.h"
#include "oomlab_git.h"   // OOMLAB_BUILD_ID's parts, as the test binary's engine
#include "tests/lazy_backend_probe.h"

namespace oomlab::testing {
namespace {
const DeviceType kAccelerator = parse_device("cuda").type;
#ifdef OOMLAB_FIXTURE_BUILD_ID
const char* const kBuild = OOMLAB_FIXTURE_BUILD_ID;   // CMakeLists.txt's lazy_backend_foreign
#else
const char* const kBuild = OOMLAB_BUILD_ID;
#endif
bool tf32 = false;
int synchronized = 0;

void probe(const LazyProbeArgs& a) {
  *a.out = kLazyProbeRan;
  *a.tf32_seen = tf32;
}

void register_fixture() {
  if (!accept_lazy_backend_build("the lazy fixture", kBuild)) return;   // lazy_backend_foreign: refused
  set_kernel<&probe>(lazy_probe_kernels(), kAccelerator, DType::f32);
  register_raw_memory(kAccelerator, [](int) { return make_host_raw_memory(); });
  BackendHooks h;
  h.synchronize = [](int) { ++synchronized; };
  h.set_options = [](const BackendOptions& o) { tf32 = o.matmul_allow_tf32.value_or(tf32); };
  register_backend_hooks(kAccelerator, h);
}
}  // namespace

extern "C" int lazy_fixture_synchronized() { return synchronized; }
}  // namespace oomlab::testing

OOMLAB_REGISTER_BACKEND("lazy-fixture", &oomlab::testing::register_fixture);
